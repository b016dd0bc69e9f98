// The C boundary of the ddp strategies: every exported entry checks its instance, runs its body
// under plugin::guard (no exception crosses the ABI) and returns a PL_Error made by the host.
// Also the entries small enough not to need a file of their own: run_step, process_group, get_stat.
#include "ddp_api.hpp"
#include "strategy.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace plrt::ddp {

using plugin::fail;

namespace {

// A NULL instance breaks ABI rule 7 and leaves no host to report through: say so, and stop.
[[noreturn]] void broken_call(const char* fn) {
  std::fprintf(stderr, "plrt ddp strategy: %s called with a NULL strategy; aborting\n", fn);
  std::abort();
}

template <class Body>
PL_Error* entry(PL_Strategy* s, const char* fn, Body&& body) noexcept {
  if (s == nullptr || s->host == nullptr) broken_call(fn);
  return plugin::guard(s->host, std::forward<Body>(body));
}

void destroy(PL_Strategy* s) noexcept {
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
  return entry(s, "setup", [&] { setup(*s, params, num_params); });
}

PL_Error* run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return entry(s, "run_step", [&] {
    if (fn == nullptr || fn->struct_size < PL_STRUCT_SIZE(PL_ReplicaStepFn, run) || fn->run == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, s->who + ": run_step needs a PL_ReplicaStepFn with `run` set (struct_size >= " +
                                        std::to_string(PL_STRUCT_SIZE(PL_ReplicaStepFn, run)) + ")");
    {
      std::lock_guard<std::mutex> lock(s->m);
      if (!s->set_up) fail(PL_ERR_INVALID_ARGUMENT, s->who + ": run_step was called before setup");
      if (s->step_active())
        fail(PL_ERR_INVALID_ARGUMENT, s->who + ": run_step: the previous step is not finished (on_grad_ready came "
                                               "for " + std::to_string(s->ready_count) +
                                               " parameters since the last after_backward); call after_backward first");
    }
    broadcast_buffers(*s);  // as DDP's forward does: replicas compute with rank 0's buffers
    check(s->host, fn->run(fn->user, 0, 1, s->dev.device, s->params, s->num_params), s->who + ": run_step");
  });
}

PL_Error* after_backward_entry(PL_Strategy* s) {
  return entry(s, "after_backward", [&] { after_backward(*s); });
}

PL_Error* teardown_entry(PL_Strategy* s) {
  return entry(s, "teardown", [&] { teardown(*s); });
}

PL_Error* on_grad_ready_entry(PL_Strategy* s, size_t index) {
  return entry(s, "on_grad_ready", [&] { on_grad_ready(*s, index); });
}

PL_Error* set_grad_sync_entry(PL_Strategy* s, int32_t enabled) {
  return entry(s, "set_grad_sync", [&] { set_grad_sync(*s, enabled != 0); });
}

PL_Error* process_group(PL_Strategy* s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group) {
  return entry(s, "process_group", [&] {
    if (out_api == nullptr || out_group == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, s->who + ": process_group: out_api and out_group must not be NULL");
    *out_api = s->pg_api;  // NULL, NULL when the job has one rank
    *out_group = s->pg;
  });
}

constexpr const char* kStatNames = "steps, buckets, bucket_bytes, early_launches, exposed_allreduce_ms, allreduce_ms";

PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return entry(s, "get_stat", [&] {
    if (name == nullptr || out == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, s->who + ": get_stat: name and out must not be NULL");
    std::lock_guard<std::mutex> lock(s->m);
    const std::string n = name;
    if (n == "steps") {
      *out = static_cast<double>(s->stats.steps);
    } else if (n == "buckets") {
      *out = static_cast<double>(s->buckets.size());
    } else if (n == "bucket_bytes") {
      size_t total = 0;
      for (const auto& k : s->buckets) total += k.plan.bytes;
      *out = static_cast<double>(total);
    } else if (n == "early_launches") {
      *out = static_cast<double>(s->stats.early_launches);
    } else if (n == "exposed_allreduce_ms") {
      *out = s->stats.exposed_ms;
    } else if (n == "allreduce_ms") {
      *out = s->stats.allreduce_ms;
    } else {
      fail(PL_ERR_NOT_FOUND, s->who + ": get_stat: unknown statistic '" + n + "'; known: " + kStatNames);
    }
  });
}

}  // namespace

PL_Error* launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept {
  (void)options;  // no option changes how workers start; create checks them (launch_info has no host to report through)
  if (out == nullptr || out->struct_size < PL_STRUCT_SIZE(PL_LaunchInfo, needs_process_group)) return nullptr;
  out->mode = mode;
  out->needs_process_group = 1;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 1;
  return nullptr;
}

PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept {
  if (host == nullptr) broken_call("create (host)");
  return plugin::guard(host, [&] {
    if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, std::string(who) + ": create: out is NULL");
    *out = nullptr;
    *out = create_strategy(who, host, config).release();
  });
}

PL_StrategyApi make_api(LaunchInfoFn launch_info_fn, CreateFn create_fn) {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
  api.launch_info = launch_info_fn;
  api.create = create_fn;
  api.destroy = destroy;
  api.setup = setup_entry;
  api.run_step = run_step;
  api.after_backward = after_backward_entry;
  api.teardown = teardown_entry;
  api.on_grad_ready = on_grad_ready_entry;
  api.set_grad_sync = set_grad_sync_entry;
  api.before_optimizer_step = nullptr;  // the gradients are already the means: nothing to do
  api.after_optimizer_step = nullptr;
  api.process_group = process_group;
  api.get_stat = get_stat;
  return api;
}

}  // namespace plrt::ddp
