// plrun's launch command: resolve the job, serve its store (node 0), start and supervise this
// node's workers.
#pragma once

#include <plrt/sdk/runtime.hpp>
#include <string>
#include <vector>

#include "launch_plan.hpp"

namespace plrt::launcher {

struct LaunchRequest {
  pl::JobRequest job;  // resolved as --dry-run resolves it
  LaunchOptions options;
  std::vector<std::string> plugin_dirs;  // --plugin-path
  std::vector<std::string> command;      // the program and its arguments
};

// Returns plrun's exit code (see supervise).  Throws pl::Error for a job that cannot start (bad
// flags, unknown program, a store that cannot be served) before any worker starts.
int launch(const LaunchRequest& request);

}  // namespace plrt::launcher
