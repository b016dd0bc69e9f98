// The state of one dp (or ddp2) strategy instance, and the operations its C entries call.  Every
// operation throws plugin::Failure; the entries (entries.cpp) turn it into a PL_Error.
//
// THE DATA PATH (n replicas in one process, device_ids[r] per replica; ddp2 adds the last stage):
//
//   setup(params) ─ root table = replica 0 ── ddp2: rank 0's values broadcast into it (inner ddp)
//   setup_replica(r, params) ─ checked against the root table
//
//   run_step(fn):   root values ──copy──► replica 1 .. n-1       (only when the root is dirty:
//                        │                                        after setup / optimizer step)
//                        ▼
//              ┌─ thread 0 (caller) ─┐ ┌─ worker 1 ─┐   ┌─ worker n-1 ─┐  persistent, each bound to
//              │ fn(0, device_ids[0])│ │ fn(1, ...) │ … │ fn(n-1, ...) │  its device once; each syncs
//              └─────────────────────┘ └────────────┘   └──────────────┘  its default stream after fn
//
//   after_backward: root.grad += replica r's grad, r = 1..n-1 in order (axpy; a replica on another
//                   device is first copied into a scratch buffer on the root's device)
//                   ddp2, world > 1, grad sync on: root grads allreduce(AVG) across processes in
//                   per-dtype flat buckets (an inner ddp instance of plrt_ddp_core, called through
//                   its C++ operations, does this, the start-up broadcast and the metrics)
//
// The optimizer then steps the root only; after_optimizer_step marks it dirty for the next copy.
//
// Files: create.cpp (config, options, the inner ddp), replica_table.cpp (setup, setup_replica
// checks), step.cpp (run_step, after_backward), replica_pool.* (the threads), entries.cpp (the C
// table, stats, teardown).
#pragma once

#include <plrt/pl_plugin.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device_memory.hpp"  // plrt_strategy_common: check(), log_and_drop(), DeviceContext
#include "replica_pool.hpp"
#include "strategy.hpp"  // plrt_ddp_core: ddp2's cross-process part

namespace plrt::dp {

using Clock = std::chrono::steady_clock;

// A buffer on (or, for a cpu-type device, in the host memory of) one device, where a replica's
// gradient is staged before it is added into a root gradient on that device.
struct Scratch {
  PL_Device device{PL_DEVICE_CPU, 0};
  bool host = false;  // alloc_host memory (the root's grad is host memory, the accelerator is not cpu)
  void* ptr = nullptr;
  size_t bytes = 0;
};

struct Stats {
  uint64_t steps = 0;       // after_backward calls that completed
  double broadcast_ms = 0;  // copying the root's values into the replicas
  double reduce_ms = 0;     // adding the replicas' gradients into the root's
  double allreduce_ms = 0;  // ddp2: the cross-process average (synced steps, world > 1)
};

struct DpStrategy {
  DpStrategy() = default;
  ~DpStrategy();  // stops the threads, frees the scratch memory, destroys the inner ddp
  DpStrategy(const DpStrategy&) = delete;
  DpStrategy& operator=(const DpStrategy&) = delete;

  const PL_Host* host = nullptr;
  std::string who;                // "dp" or "ddp2": begins every message, names the log source
  bool across_processes = false;  // ddp2
  int32_t rank = 0, world = 1;

  const PL_AcceleratorApi* api = nullptr;  // NULL only for a single replica without an accelerator
  PL_Accelerator* acc = nullptr;
  PL_DeviceType device_type = PL_DEVICE_CPU;
  bool synchronous = true;          // PL_ACCEL_SYNCHRONOUS: no stream to wait for
  std::vector<int32_t> device_ids;  // replica r drives device_ids[r]; size = the replica count
  strategy::DeviceContext dev;      // for the copy helper (device: the root's)

  // ddp2: a ddp instance of plrt_ddp_core on the root's device (group, broadcast, allreduce).
  std::unique_ptr<ddp::DdpStrategy> inner;

  // From setup until teardown.
  bool set_up = false;
  PL_Parameter* root = nullptr;  // borrowed from setup
  size_t num_params = 0;
  std::vector<std::string> names;       // display names ("params[3]" where the caller gave none)
  std::vector<PL_Parameter*> replicas;  // [r]: replica r's table (borrowed); [0] = root; NULL = missing
  // replica r >= 1's table, copied at setup_replica (the array is borrowed for that call only; names
  // point at the root's, which live until teardown)
  std::vector<std::vector<PL_Parameter>> replica_tables;
  bool dirty = true;  // the root's values changed since the last copy
  bool grad_sync = true;
  bool in_step = false;  // run_step is running fn: the state must not change
  std::vector<Scratch> scratch;
  ReplicaPool pool;
  Stats stats;
  std::mutex m;  // state and stats; never held while fn runs

  size_t n() const { return device_ids.size(); }
  PL_Device device_of(size_t r) const { return PL_Device{device_type, device_ids[r]}; }
  // "entry 3 'fc.weight'"
  std::string entry_name(size_t i) const { return "entry " + std::to_string(i) + " '" + names[i] + "'"; }
  // "replica 2 (device 2)"
  std::string replica_name(size_t r) const {
    return "replica " + std::to_string(r) + " (device " + std::to_string(device_ids[r]) + ")";
  }
};

// The state must not change while fn runs (a replica's fn calling back into the strategy).
inline void require_idle(const DpStrategy& s, const char* fn) {
  if (s.in_step)
    plugin::fail(PL_ERR_INVALID_ARGUMENT, s.who + ": " + fn +
                                              " was called while run_step is running the replicas' "
                                              "step functions; call it after run_step returns");
}

// create.cpp
using OptionPairs = std::vector<std::pair<std::string, std::string>>;
// The options, as create and launch_info read them: dp takes none; ddp2 takes bucket_cap_mb and
// pg.<name>, whose values ddp's parser checks.  Throws plugin::Failure naming an unknown key (with
// the valid ones) or a bad value.
OptionPairs parse_options(const std::string& who, bool across_processes, const PL_OptionList& list);
std::unique_ptr<DpStrategy> create_strategy(const char* who, bool across_processes, const PL_Host* host,
                                            const PL_StrategyConfig* config);

// replica_table.cpp (each takes s.m)
void setup(DpStrategy& s, PL_Parameter* params, size_t num_params);
void setup_replica(DpStrategy& s, int32_t replica, PL_Parameter* params, size_t num_params);
void teardown(DpStrategy& s);
// "replica 2 (device 2) was not registered with setup_replica" when one is missing.  Caller holds s.m.
void require_replicas_locked(const DpStrategy& s, const char* fn);

// step.cpp
void run_step(DpStrategy& s, const PL_ReplicaStepFn& fn);
void after_backward(DpStrategy& s);

void free_scratch(DpStrategy& s) noexcept;  // logs what it cannot free

// create.cpp: "cpu", "cuda"; "cpu:0", "cuda:1"
std::string device_type_name(PL_DeviceType t);
std::string device_name(PL_Device d);
// The same memory space: one device, or host memory on both sides.
inline bool same_memory(PL_Device a, PL_Device b) {
  return a.type == b.type && (a.type == PL_DEVICE_CPU || a.index == b.index);
}
inline size_t tensor_bytes(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

}  // namespace plrt::dp
