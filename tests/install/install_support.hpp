// Helpers of the install tests: a temporary folder, commands run with a deadline (through
// tests/common's job launcher, so a hung command is stopped and reported), and plrt installed into a
// prefix the way a user installs it (cmake --install build --prefix P).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace plrt_install_test {

namespace fs = std::filesystem;
using plrt_test::EnvVars;
using plrt_test::ProcessResult;

// A fresh folder under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "plrt-install-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs argv with `env` on top of this process's environment (PL_PLUGIN_PATH and the launcher's
// variables removed, so nothing of the build tree leaks in), in `cwd`, for at most `deadline`.
inline ProcessResult run(const std::vector<std::string>& argv, const EnvVars& env = {}, const fs::path& cwd = {},
                         std::chrono::seconds deadline = std::chrono::seconds(120)) {
  plrt_test::ProcessSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.unset_env = {"PL_PLUGIN_PATH", "RANK",        "WORLD_SIZE",      "LOCAL_RANK",
                    "MASTER_ADDR",    "MASTER_PORT", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH"};
  if (!cwd.empty()) spec.cwd = cwd.string();
  spec.label = argv.empty() ? "?" : argv[0];
  plrt_test::Job job({spec});
  plrt_test::WaitOptions wait;
  wait.deadline = deadline;
  return job.wait(wait).processes.at(0);
}

// `command` through /bin/sh -c (for the one-line builds a README shows, with $(pkg-config ...)).
inline ProcessResult sh(const std::string& command, const EnvVars& env = {}, const fs::path& cwd = {},
                        std::chrono::seconds deadline = std::chrono::seconds(120)) {
  return run({"/bin/sh", "-c", command}, env, cwd, deadline);
}

inline std::string describe(const ProcessResult& r) { return r.label + ": " + r.status() + "\n" + r.output; }

// `cmake --install <build> --prefix <prefix>`: every component, as a user installs plrt.
inline ::testing::AssertionResult install_into(const fs::path& prefix) {
  auto r = run({CMAKE_COMMAND_PATH, "--install", PLRT_BUILD_DIR, "--prefix", prefix.string()});
  if (!r.ok()) return ::testing::AssertionFailure() << describe(r);
  return ::testing::AssertionSuccess();
}

// Configures and builds the CMake project at `source` into `build` against the plrt found under
// `prefix_path` (CMAKE_PREFIX_PATH), with the compilers and generator of this build.
inline ::testing::AssertionResult cmake_build(const fs::path& source, const fs::path& build,
                                              const std::string& prefix_path,
                                              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> configure{CMAKE_COMMAND_PATH,
                                     "-S",
                                     source.string(),
                                     "-B",
                                     build.string(),
                                     "-G",
                                     CMAKE_GENERATOR_NAME,
                                     "-DCMAKE_MAKE_PROGRAM=" CMAKE_MAKE_PROGRAM_PATH,
                                     "-DCMAKE_C_COMPILER=" C_COMPILER_PATH,
                                     "-DCMAKE_CXX_COMPILER=" CXX_COMPILER_PATH,
                                     "-DCMAKE_BUILD_TYPE=Release",
                                     "-DCMAKE_PREFIX_PATH=" + prefix_path};
  configure.insert(configure.end(), extra.begin(), extra.end());
  auto r = run(configure, {}, {}, std::chrono::seconds(300));
  if (!r.ok()) return ::testing::AssertionFailure() << describe(r);
  // 600 s: plrt::torch against libtorch's headers takes about 4 minutes on 2 cores by itself
  r = run({CMAKE_COMMAND_PATH, "--build", build.string()}, {}, {}, std::chrono::seconds(600));
  if (!r.ok()) return ::testing::AssertionFailure() << describe(r);
  return ::testing::AssertionSuccess();
}

// A small plrt-mlp run (about a second per epoch at 2 ranks): the same model the training tests use.
inline std::vector<std::string> mlp_args(const fs::path& mlp) {
  return {mlp.string(), "--features", "24",       "--hidden", "16,12",           "--classes", "5",
          "--samples",  "2400",       "--epochs", "2",        "--no-checkpoint", "--seed",    "7"};
}

}  // namespace plrt_install_test
