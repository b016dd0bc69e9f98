// The C boundary of the ddp strategies: every exported entry checks its instance, runs its body
// under plugin::guard (no exception crosses the ABI) and returns a PL_Error made by the host
// (plrt_strategy_common's entry_support.hpp).  Also the entries small enough not to need a file of
// their own: run_step, process_group, get_stat.
#include "ddp_api.hpp"
#include "entry_support.hpp"
#include "strategy.hpp"

namespace plrt::ddp {

using plugin::fail;

namespace {

constexpr const char* kFamily = "ddp";

template <class Body>
PL_Error* entry(PL_Strategy* s, const char* fn, Body&& body) noexcept {
  return strategy::entry(s, kFamily, fn, [&](PL_Strategy&) { body(); });
}

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(s, [](PL_Strategy& d) { teardown(d); });
}

PL_Error* setup_entry(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return entry(s, "setup", [&] { setup(*s, params, num_params); });
}

PL_Error* run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return entry(s, "run_step", [&] {
    strategy::check_step_fn(s->who, fn);
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
    strategy::check_process_group_outs(s->who, out_api, out_group);
    *out_api = s->pg_api;  // NULL, NULL when the job has one rank
    *out_group = s->pg;
  });
}

PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return entry(s, "get_stat", [&] {
    std::lock_guard<std::mutex> lock(s->m);
    size_t bucket_bytes = 0;
    for (const auto& k : s->buckets) bucket_bytes += k.plan.bytes;
    strategy::answer_stat(s->who, name, out,
                          {{"steps", static_cast<double>(s->stats.steps)},
                           {"buckets", static_cast<double>(s->buckets.size())},
                           {"bucket_bytes", static_cast<double>(bucket_bytes)},
                           {"early_launches", static_cast<double>(s->stats.early_launches)},
                           {"exposed_allreduce_ms", s->stats.exposed_ms},
                           {"allreduce_ms", s->stats.allreduce_ms}});
  });
}

}  // namespace

PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept {
  return strategy::create(kFamily, who, host, out, [&] { return create_strategy(who, host, config).release(); });
}

PL_Error* Family::launch_info(PL_LaunchMode mode, const PL_OptionList* /*options*/, PL_LaunchInfo* out) noexcept {
  return strategy::fill_launch_info(mode, true, 1, out);
}

PL_StrategyApi Family::table() {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
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
