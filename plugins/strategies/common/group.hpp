// A process group that a strategy makes and owns, found by backend name through the host (never
// linked: a strategy plugin links to no other plugin or runtime symbol), and the blocking calls a
// strategy makes on it outside its overlapped buckets (start-up broadcast, metrics, agreements).
// Each blocking call is bounded by the group's timeout; a failure throws plugin::Failure with the
// group's own message behind `what`.
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "device_memory.hpp"

namespace plrt::strategy {

struct GroupSpec {
  std::string who;      // the strategy's name: begins every message
  std::string backend;  // a name for PL_Host.find_plugin ("gloo", "nccl", an alias)
  std::string name;     // PL_ProcessGroupConfig.group_name: prefixes its store keys; unique per group
  int32_t rank = 0, world = 1;
  PL_Store* store = nullptr;  // borrowed; outlives the group
  int64_t timeout_ms = PL_DEFAULT_TIMEOUT_MS;
  PL_Device device{PL_DEVICE_CPU, 0};
  const PL_AcceleratorApi* accelerator_api = nullptr;  // borrowed, may be NULL
  PL_Accelerator* accelerator = nullptr;
  std::vector<std::pair<std::string, std::string>> options;  // the user's pg.* options ("pg." removed)
  // Entries the strategy needs beyond create/destroy/work_*/abort, for the error that lists them.
  std::vector<std::string> needs;
};

class Group {
 public:
  Group() = default;
  // Finds the backend, checks that it has what spec.needs names, and creates the group with the
  // alias's presets then spec.options.
  Group(const PL_Host* host, const GroupSpec& spec);
  ~Group() { reset(); }
  Group(Group&& o) noexcept { *this = std::move(o); }
  Group& operator=(Group&& o) noexcept;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  explicit operator bool() const { return pg_ != nullptr; }
  const PL_ProcessGroupApi* api() const { return api_; }
  PL_ProcessGroup* get() const { return pg_; }
  const std::string& backend() const { return backend_; }
  int64_t timeout_ms() const { return timeout_ms_; }
  void reset() noexcept;  // destroys the group

  // Blocking collectives (an ABI >= 1.1 plugin runs them on the calling thread; an older one is
  // waited for).  `what` begins the error: "ddp: the start-up broadcast".
  void broadcast(PL_Tensor& t, int32_t root, const std::string& what) const;
  void allreduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const;
  void allgather(const PL_Tensor& in, PL_Tensor* outs, size_t n, const std::string& what) const;
  // Waits for `w` (bounded by wait_ms), frees it and throws its error behind `what`; on a timeout the
  // group is aborted first, so that nothing stays in flight.
  void wait(PL_Work* w, int64_t wait_ms, const std::string& what) const;
  // Fails every pending operation (from any thread); logs what it cannot do.
  void abort() const noexcept;

 private:
  void finish(PL_Error* e, PL_Work* w, const std::string& what) const;

  const PL_Host* host_ = nullptr;
  const PL_ProcessGroupApi* api_ = nullptr;
  PL_ProcessGroup* pg_ = nullptr;
  std::string who_;  // log source
  std::string backend_;
  int64_t timeout_ms_ = PL_DEFAULT_TIMEOUT_MS;
  bool blocks_ = false;  // ABI >= 1.1: out == NULL makes a blocking call
};

}  // namespace plrt::strategy
