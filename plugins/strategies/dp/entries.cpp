// The C boundary of the dp strategies: every exported entry checks its instance, runs its body
// under plugin::guard (no exception crosses the ABI) and returns a PL_Error made by the host.  Also
// the entries small enough not to need a file of their own.
//
// The instance is a plrt::dp::DpStrategy behind the opaque PL_Strategy*: this library also links
// plrt_ddp_core, whose struct PL_Strategy is ddp's, so dp never defines that type itself.
#include "dp_api.hpp"
#include "dp_strategy.hpp"

#include <cstdio>
#include <cstdlib>

namespace plrt::dp {

using plugin::fail;

namespace {

DpStrategy* as_dp(PL_Strategy* s) { return reinterpret_cast<DpStrategy*>(s); }

// A NULL instance breaks ABI rule 7 and leaves no host to report through: say so, and stop.
[[noreturn]] void broken_call(const char* fn) {
  std::fprintf(stderr, "plrt dp strategy: %s called with a NULL strategy; aborting\n", fn);
  std::abort();
}

template <class Body>
PL_Error* entry(PL_Strategy* ps, const char* fn, Body&& body) noexcept {
  DpStrategy* s = as_dp(ps);
  if (s == nullptr || s->host == nullptr) broken_call(fn);
  return plugin::guard(s->host, [&] { body(*s); });
}

void destroy(PL_Strategy* ps) noexcept {
  DpStrategy* s = as_dp(ps);
  if (s == nullptr) return;
  try {
    teardown(*s);
  } catch (const std::exception& e) {
    plugin::logf(s->host, PL_LOG_WARN, s->who.c_str(), "destroy: teardown failed: %s", e.what());
  } catch (...) {
  }
  delete s;
}

PL_Error* setup_entry(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return entry(s, "setup", [&](DpStrategy& d) { setup(d, params, num_params); });
}

PL_Error* setup_replica_entry(PL_Strategy* s, int32_t replica, PL_Parameter* params, size_t num_params) {
  return entry(s, "setup_replica", [&](DpStrategy& d) { setup_replica(d, replica, params, num_params); });
}

PL_Error* run_step_entry(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return entry(s, "run_step", [&](DpStrategy& d) {
    if (fn == nullptr || fn->struct_size < PL_STRUCT_SIZE(PL_ReplicaStepFn, run) || fn->run == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": run_step needs a PL_ReplicaStepFn with `run` set (struct_size >= " +
                                        std::to_string(PL_STRUCT_SIZE(PL_ReplicaStepFn, run)) + ")");
    run_step(d, *fn);
  });
}

PL_Error* after_backward_entry(PL_Strategy* s) {
  return entry(s, "after_backward", [&](DpStrategy& d) { after_backward(d); });
}

PL_Error* teardown_entry(PL_Strategy* s) {
  return entry(s, "teardown", [&](DpStrategy& d) { teardown(d); });
}

// Only the cross-process part (ddp2) is switched: the replicas' local sum is how dp computes the
// gradient at all.
PL_Error* set_grad_sync_entry(PL_Strategy* s, int32_t enabled) {
  return entry(s, "set_grad_sync", [&](DpStrategy& d) {
    std::lock_guard<std::mutex> lock(d.m);
    require_idle(d, "set_grad_sync");
    if (d.inner != nullptr) pass_on(d.host, d.inner_api.set_grad_sync(d.inner, enabled));
    d.grad_sync = enabled != 0;
  });
}

PL_Error* after_optimizer_step_entry(PL_Strategy* s) {
  return entry(s, "after_optimizer_step", [&](DpStrategy& d) {
    std::lock_guard<std::mutex> lock(d.m);
    require_idle(d, "after_optimizer_step");
    d.dirty = true;  // the root's values changed: the next run_step copies them into the replicas
  });
}

PL_Error* process_group_entry(PL_Strategy* s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group) {
  return entry(s, "process_group", [&](DpStrategy& d) {
    if (out_api == nullptr || out_group == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": process_group: out_api and out_group must not be NULL");
    *out_api = nullptr;  // dp, and ddp2 with one process: no group
    *out_group = nullptr;
    if (d.inner != nullptr) pass_on(d.host, d.inner_api.process_group(d.inner, out_api, out_group));
  });
}

constexpr const char* kStatNames = "replicas, steps, broadcast_ms, reduce_ms, allreduce_ms";

PL_Error* get_stat_entry(PL_Strategy* s, const char* name, double* out) {
  return entry(s, "get_stat", [&](DpStrategy& d) {
    if (name == nullptr || out == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": get_stat: name and out must not be NULL");
    std::lock_guard<std::mutex> lock(d.m);
    const std::string n = name;
    if (n == "replicas") {
      *out = static_cast<double>(d.n());
    } else if (n == "steps") {
      *out = static_cast<double>(d.stats.steps);
    } else if (n == "broadcast_ms") {
      *out = d.stats.broadcast_ms;
    } else if (n == "reduce_ms") {
      *out = d.stats.reduce_ms;
    } else if (n == "allreduce_ms") {
      *out = d.stats.allreduce_ms;
    } else {
      fail(PL_ERR_NOT_FOUND, d.who + ": get_stat: unknown statistic '" + n + "'; known: " + kStatNames);
    }
  });
}

PL_Error* num_replicas_entry(PL_Strategy* s, int32_t* out) {
  return entry(s, "num_replicas", [&](DpStrategy& d) {
    if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": num_replicas: out must not be NULL");
    *out = static_cast<int32_t>(d.n());
  });
}

}  // namespace

PL_Error* launch_info(bool across_processes, const PL_OptionList* options, PL_LaunchInfo* out) noexcept {
  (void)options;  // no option changes how workers start; create checks them (launch_info has no host to report through)
  if (out == nullptr || out->struct_size < PL_STRUCT_SIZE(PL_LaunchInfo, needs_process_group)) return nullptr;
  out->mode = PL_LAUNCH_SINGLE_PROCESS;
  out->needs_process_group = across_processes ? 1 : 0;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 0;
  return nullptr;
}

PL_Error* create(const char* who, bool across_processes, const PL_Host* host, const PL_StrategyConfig* config,
                 PL_Strategy** out) noexcept {
  if (host == nullptr) broken_call("create (host)");
  return plugin::guard(host, [&] {
    if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, std::string(who) + ": create: out is NULL");
    *out = nullptr;
    *out = reinterpret_cast<PL_Strategy*>(create_strategy(who, across_processes, host, config).release());
  });
}

PL_StrategyApi make_api(LaunchInfoFn launch_info_fn, CreateFn create_fn) {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
  api.launch_info = launch_info_fn;
  api.create = create_fn;
  api.destroy = destroy;
  api.setup = setup_entry;
  api.run_step = run_step_entry;
  api.after_backward = after_backward_entry;
  api.teardown = teardown_entry;
  api.on_grad_ready = nullptr;  // nothing to overlap: the sum waits for every replica anyway
  api.set_grad_sync = set_grad_sync_entry;
  api.before_optimizer_step = nullptr;
  api.after_optimizer_step = after_optimizer_step_entry;
  api.process_group = process_group_entry;
  api.get_stat = get_stat_entry;
  api.num_replicas = num_replicas_entry;
  api.setup_replica = setup_replica_entry;
  return api;
}

}  // namespace plrt::dp
