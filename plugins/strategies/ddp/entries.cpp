// The C boundary of the ddp strategies: every exported entry checks its instance, runs its body
// under plugin::guard (no exception crosses the ABI) and returns a PL_Error made by the host
// (plrt_strategy_common's entry_support.hpp).  Also the entries small enough not to need a file of
// their own: optimizer_step, get_stat.
#include "ddp_api.hpp"
#include "ddp_options.hpp"
#include "entry_support.hpp"
#include "strategy.hpp"

namespace plrt::ddp {

using plugin::fail;
using strategy::check;

// The gradients are every rank's mean, so every rank steps every trainable parameter whole, and the
// values stay equal without communication.
void optimizer_step(DdpStrategy& d, const PL_OptimizerFn* fn) {
  if (fn == nullptr || fn->struct_size < PL_STRUCT_SIZE(PL_OptimizerFn, step) || fn->step == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, d.who + ": optimizer_step needs a PL_OptimizerFn with `step` set");
  {
    std::lock_guard<std::mutex> lock(d.m);
    if (!d.set_up) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": optimizer_step was called before setup");
  }
  check(d.host, fn->step(fn->user, d.steps.data(), d.steps.size()), d.who + ": optimizer_step");
}

namespace {

constexpr const char* kFamily = "ddp";

DdpStrategy* self(PL_Strategy* s) { return strategy::as<DdpStrategy>(s); }

template <class Body>
PL_Error* entry(PL_Strategy* s, const char* fn, Body&& body) noexcept {
  return strategy::entry(self(s), kFamily, fn, [&](DdpStrategy& d) { body(d); });
}

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(self(s), [](DdpStrategy& d) { teardown(d); });
}

PL_Error* setup_entry(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return entry(s, "setup", [&](DdpStrategy& d) { setup(d, params, num_params); });
}

PL_Error* run_step_entry(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return entry(s, "run_step", [&](DdpStrategy& d) { run_step(d, fn); });
}

PL_Error* after_backward_entry(PL_Strategy* s) {
  return entry(s, "after_backward", [&](DdpStrategy& d) { after_backward(d); });
}

PL_Error* teardown_entry(PL_Strategy* s) {
  return entry(s, "teardown", [&](DdpStrategy& d) { teardown(d); });
}

PL_Error* on_grad_ready_entry(PL_Strategy* s, size_t index) {
  return entry(s, "on_grad_ready", [&](DdpStrategy& d) { on_grad_ready(d, index); });
}

PL_Error* set_grad_sync_entry(PL_Strategy* s, int32_t enabled) {
  return entry(s, "set_grad_sync", [&](DdpStrategy& d) { set_grad_sync(d, enabled != 0); });
}

PL_Error* process_group_entry(PL_Strategy* s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group) {
  return entry(s, "process_group", [&](DdpStrategy& d) { process_group(d, out_api, out_group); });
}

PL_Error* optimizer_step_entry(PL_Strategy* s, const PL_OptimizerFn* fn) {
  return entry(s, "optimizer_step", [&](DdpStrategy& d) { optimizer_step(d, fn); });
}

PL_Error* agree_skip_entry(PL_Strategy* s, int32_t found_inf, int32_t* out_skip) {
  return entry(s, "agree_skip", [&](DdpStrategy& d) {
    if (out_skip == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": agree_skip: out_skip is NULL");
    *out_skip = agree_skip(d, found_inf != 0) ? 1 : 0;
  });
}

PL_Error* reduce_entry(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op) {
  return entry(s, "reduce", [&](DdpStrategy& d) {
    if (tensor == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": reduce: tensor is NULL");
    reduce(d, *tensor, op);
  });
}

PL_Error* all_gather_entry(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs) {
  return entry(s, "all_gather", [&](DdpStrategy& d) {
    if (input == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": all_gather: input is NULL");
    all_gather(d, *input, outputs, num_outputs);
  });
}

PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return entry(s, "get_stat", [&](DdpStrategy& d) {
    const reducer::ReducerStats st = d.grads->stats();
    std::lock_guard<std::mutex> lock(d.m);
    strategy::answer_stat(
        d.who, name, out,
        {{"steps", static_cast<double>(st.steps)},
         {"buckets", static_cast<double>(d.grads->num_buckets())},
         {"bucket_bytes", static_cast<double>(d.grads->bucket_bytes())},
         {"early_launches", static_cast<double>(st.early_launches)},
         {"exposed_allreduce_ms", st.exposed_ms},
         {"allreduce_ms", st.comm_ms},
         {"buffer_broadcast_bytes", static_cast<double>(d.opts.broadcast_buffers ? d.buffer_bytes : 0)},
         {"frozen_bytes", static_cast<double>(d.frozen_bytes)}});
  });
}

}  // namespace

PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept {
  return strategy::create(kFamily, who, host, out,
                          [&] { return strategy::handle(create_strategy(who, host, config).release()); });
}

// The options are checked by the parser create uses, so that the two cannot disagree.
PL_Error* Family::launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept {
  return strategy::launch_guard(kFamily, [&] {
    if (options != nullptr) parse_options(mode == PL_LAUNCH_SPAWN ? "ddp_spawn" : "ddp", *options);
    strategy::fill_launch_info(mode, true, 1, out);
  });
}

PL_StrategyApi Family::table() {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
  api.destroy = destroy;
  api.setup = setup_entry;
  api.run_step = run_step_entry;
  api.after_backward = after_backward_entry;
  api.teardown = teardown_entry;
  api.on_grad_ready = on_grad_ready_entry;
  api.set_grad_sync = set_grad_sync_entry;
  api.before_optimizer_step = nullptr;  // the gradients are already the means: nothing to do
  api.after_optimizer_step = nullptr;
  api.process_group = process_group_entry;
  api.get_stat = get_stat;
  api.num_replicas = nullptr;  // one replica per process
  api.setup_replica = nullptr;
  api.optimizer_step = optimizer_step_entry;
  api.agree_skip = agree_skip_entry;
  api.reduce = reduce_entry;
  api.all_gather = all_gather_entry;
  api.state_info = nullptr;  // no state of its own: the checkpoint's model and optimizer are everything
  api.save_state = nullptr;
  api.load_state = nullptr;
  return api;
}

}  // namespace plrt::ddp
