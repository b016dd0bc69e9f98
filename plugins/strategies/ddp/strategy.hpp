// The state of one ddp (or ddp_spawn) strategy instance, and the operations its C entries
// (entries.cpp) and ddp2's cross-process part (plrt_dp_core) call.  Every operation throws
// plugin::Failure; the entries turn it into a PL_Error.  The instance is a DdpStrategy behind the
// opaque PL_Strategy* (strategy::as / handle): no strategy family defines struct PL_Strategy.
//
// Files: create.cpp (config, options, the process group, destroy), setup.cpp (parameters, the
// start-up broadcast, the per-step buffer broadcast, teardown), entries.cpp (the C table),
// collectives.cpp (the 1.4 entries that communicate outside the buckets: reduce, all_gather,
// agree_skip, on a group of their own).  The gradient buckets are plrt_reducer's (../reducer):
// a Reducer with the Allreduce communication.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bucket_plan.hpp"
#include "ddp_options.hpp"
#include "device_memory.hpp"
#include "group.hpp"
#include "reducer.hpp"

namespace plrt::ddp {

// A flat buffer that coalesces several parameters of one dtype for a broadcast.
struct FlatGroup {
  reducer::PlannedBucket plan;
  strategy::DeviceMemory buffer;
  PL_Tensor tensor{};
};

struct DdpStrategy {
  DdpStrategy() = default;
  ~DdpStrategy();  // teardown() must have run; the reducer goes, then the groups
  DdpStrategy(const DdpStrategy&) = delete;
  DdpStrategy& operator=(const DdpStrategy&) = delete;

  // Members are destroyed in reverse order: the reducer (which borrows dev, group and comm) is
  // declared after them.
  const PL_Host* host = nullptr;
  std::string who;  // "ddp", "ddp_spawn" or "ddp2": begins every message, names the log source
  int32_t rank = 0, world = 1, local_rank = 0;
  strategy::DeviceContext dev;  // accelerator and device; buffers keep a pointer to it
  int64_t timeout_ms = PL_DEFAULT_TIMEOUT_MS;
  DdpOptions opts;
  strategy::GroupSpec group_spec;  // how `group` was made; `metrics` is made the same way
  strategy::Group group;           // empty when world == 1: the buckets and broadcasts
  strategy::Group metrics;         // reduce / all_gather / agree_skip; made at their first call
  reducer::Allreduce comm;
  std::unique_ptr<reducer::Reducer> grads;  // with `comm`, or a strategy built on ddp's comm (CoreSpec)
  bool buckets = true;                      // false: CoreSpec::own_gradient_sync (grads never set up)

  // From setup until teardown (under m; the reducer has its own lock).
  std::mutex m;
  bool set_up = false;
  PL_Parameter* params = nullptr;  // borrowed from setup
  size_t num_params = 0;
  std::vector<std::string> names;        // display names ("params[3]" where the caller gave none)
  std::vector<FlatGroup> buffer_groups;  // BUFFER entries, broadcast before every run_step
  size_t buffer_bytes = 0;               // their bytes (also at world 1, for get_stat)
  size_t frozen_bytes = 0;               // FROZEN entries: broadcast at setup only
  std::vector<PL_ParamRange> steps;      // optimizer_step's ranges: every TRAINABLE entry whole

  // "parameter 'fc.weight' (index 3)"
  std::string param_name(size_t i) const { return "parameter '" + names[i] + "' (index " + std::to_string(i) + ")"; }
};

// create.cpp
std::unique_ptr<DdpStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* config);

// A strategy built on ddp's core (ddp_sharded): its parsed options, the bucket communication its
// reducer uses instead of the allreduce (borrowed: it must outlive the DdpStrategy), and the
// process-group entries it needs beyond ddp's.
struct CoreSpec {
  DdpOptions opts;
  reducer::BucketComm* comm = nullptr;
  std::vector<std::string> extra_needs;
  // The strategy syncs the gradients itself (horovod's fusion): setup lays out no buckets and
  // allocates no bucket memory, and the bucket hooks must not be called on the core.
  bool own_gradient_sync = false;
};
std::unique_ptr<DdpStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* config,
                                             const CoreSpec& spec);

// setup.cpp
void setup(DdpStrategy& s, PL_Parameter* params, size_t num_params);
void broadcast_buffers(DdpStrategy& s);  // the per-step broadcast of BUFFER entries
// The step: checks (set up, the previous step finished), the buffer broadcast (unless
// `with_buffers` is false: bagua's async, whose steps never wait for other ranks), then fn on this
// process's one replica.  Also ddp_sharded's.
void run_step(DdpStrategy& s, const PL_ReplicaStepFn* fn, bool with_buffers = true);
// The group for metrics: NULL, NULL when the job has one rank.
void process_group(const DdpStrategy& s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group);
void teardown(DdpStrategy& s);  // waits for or aborts outstanding work (bounded), frees buffers

// The reducer's entries, with ddp's "called before setup" checks.
void on_grad_ready(DdpStrategy& s, size_t index);
void after_backward(DdpStrategy& s);
void set_grad_sync(DdpStrategy& s, bool enabled);
bool step_active(const DdpStrategy& s);

// entries.cpp: the host's optimizer on every trainable parameter whole (fn->step with `steps`).
void optimizer_step(DdpStrategy& s, const PL_OptimizerFn* fn);

// collectives.cpp: blocking, on the metrics group (made at the first call, on every rank alike),
// so they never interleave with the buckets' collectives on `group`.  At world 1 they compute
// locally.
void reduce(DdpStrategy& s, PL_Tensor& t, PL_ReduceOp op);
void all_gather(DdpStrategy& s, const PL_Tensor& in, PL_Tensor* outs, size_t n);
bool agree_skip(DdpStrategy& s, bool found_inf);

}  // namespace plrt::ddp
