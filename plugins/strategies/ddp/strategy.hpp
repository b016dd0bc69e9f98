// The state of one ddp (or ddp_spawn) strategy instance, and the operations the C entries
// (entries.cpp) call.  Every operation throws plugin::Failure; the entries turn it into a PL_Error.
//
// Files: create.cpp (config, process group, destroy), setup.cpp (parameters, the start-up
// broadcast, buckets, teardown), reducer.cpp (on_grad_ready, after_backward, set_grad_sync: the
// gradient buckets' allreduces), entries.cpp (the C table, run_step, get_stat).
#pragma once

#include "bucket_plan.hpp"
#include "ddp_options.hpp"
#include "device_memory.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace plrt::ddp {

using Clock = std::chrono::steady_clock;

// A bucket of gradients and its flat buffer on the strategy's device.
struct Bucket {
  PlannedBucket plan;
  DeviceMemory buffer;    // empty when the job has one rank (nothing to reduce)
  PL_Tensor tensor{};     // a flat view of `buffer`; borrowed by the allreduce until its work completes
  size_t pending = 0;     // members whose gradient is not ready yet in this step
  PL_Work* work = nullptr;  // the allreduce in flight, owned until after_backward (or teardown)
};

// A flat buffer that coalesces several parameters of one dtype for a broadcast.
struct FlatGroup {
  PlannedBucket plan;
  DeviceMemory buffer;
  PL_Tensor tensor{};
};

struct Stats {
  uint64_t steps = 0;           // after_backward calls that completed (synced or not)
  uint64_t early_launches = 0;  // buckets launched from on_grad_ready, before after_backward
  double exposed_ms = 0;        // time blocked in after_backward waiting for allreduces
  double allreduce_ms = 0;      // per synced step: its first launch to its last completion
};

}  // namespace plrt::ddp

struct PL_Strategy {
  ~PL_Strategy();  // destroys the group; teardown() must have released the works and buffers

  const PL_Host* host = nullptr;
  std::string who;  // "ddp" or "ddp_spawn": begins every message, names the log source
  int32_t rank = 0, world = 1, local_rank = 0;
  plrt::ddp::DeviceContext dev;  // accelerator and device; buffers keep a pointer to it
  int64_t timeout_ms = PL_DEFAULT_TIMEOUT_MS;
  plrt::ddp::DdpOptions opts;

  // The process group (NULL when world == 1).
  std::string backend;
  const PL_ProcessGroupApi* pg_api = nullptr;
  PL_ProcessGroup* pg = nullptr;
  bool pg_blocks = false;  // the plugin is ABI >= 1.1: out == NULL makes a blocking call

  // From setup until teardown.
  bool set_up = false;
  PL_Parameter* params = nullptr;  // borrowed from setup
  size_t num_params = 0;
  std::vector<std::string> names;  // display names ("params[3]" where the caller gave none)
  std::vector<plrt::ddp::Bucket> buckets;
  std::vector<int64_t> bucket_of;  // per parameter: its bucket, -1 when it has none
  std::vector<plrt::ddp::FlatGroup> buffer_groups;  // broadcast before every run_step

  // The step in progress and the statistics (under m: on_grad_ready may come from another thread).
  std::mutex m;
  bool grad_sync = true;
  std::vector<uint8_t> ready;  // per parameter: on_grad_ready came in this step
  size_t ready_count = 0;
  size_t next_launch = 0;  // buckets [0, next_launch) are launched in this step
  plrt::ddp::Clock::time_point first_launch;
  plrt::ddp::Stats stats;

  bool step_active() const { return ready_count > 0 || next_launch > 0; }
  // "parameter 'fc.weight' (index 3)"
  std::string param_name(size_t i) const { return "parameter '" + names[i] + "' (index " + std::to_string(i) + ")"; }
};

namespace plrt::ddp {

// create.cpp
std::unique_ptr<PL_Strategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* config);

// setup.cpp
void setup(PL_Strategy& s, PL_Parameter* params, size_t num_params);
void broadcast_buffers(PL_Strategy& s);  // the per-step broadcast of requires_grad == 0 parameters
void teardown(PL_Strategy& s);           // waits for or aborts outstanding work (bounded), frees buffers
// A blocking broadcast from rank 0 of `t` on the group; `what` names it in errors.
void broadcast_blocking(PL_Strategy& s, PL_Tensor& t, const std::string& what);

// reducer.cpp (each takes s.m itself)
void on_grad_ready(PL_Strategy& s, size_t index);
void after_backward(PL_Strategy& s);
void set_grad_sync(PL_Strategy& s, bool enabled);
// Waits (bounded) for every bucket's outstanding allreduce and frees its handle, aborting the
// group when one does not finish in time; returns the first failure's message ("" if none).
// Caller holds s.m.
std::string drain_locked(PL_Strategy& s, int64_t wait_ms);
void reset_step_locked(PL_Strategy& s);

// "bucket 2 of 5 (3 parameters, 4096 bytes of float32)"
std::string describe_bucket(const PL_Strategy& s, size_t b);

}  // namespace plrt::ddp
