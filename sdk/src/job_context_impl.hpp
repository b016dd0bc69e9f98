// pl::JobContext's state, for pl::GradientSync (which makes its strategy over the context's
// session) and job_context.cpp.
#pragma once

#include <map>
#include <memory>
#include <plrt/sdk/job_context.hpp>
#include <string>

#include "job_session.hpp"

namespace pl {

struct JobContext::Impl {
  GradientSyncOptions o;
  plrt::sdk::JobSession session;
  std::map<std::string, std::shared_ptr<ProcessGroup>> groups;

  // A store client in a key space of its own ("<prefix><name>/"), for a second strategy of this job
  // (each strategy names its process group the same way, so two of them need two key spaces); the
  // session's own store for an empty name.  Null for one process.
  std::unique_ptr<Store> store_for(const std::string& name) const;
};

}  // namespace pl
