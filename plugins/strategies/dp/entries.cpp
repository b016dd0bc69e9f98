// The C boundary of the dp strategies: every exported entry checks its instance, runs its body
// under plugin::guard (no exception crosses the ABI) and returns a PL_Error made by the host
// (plrt_strategy_common's entry_support.hpp).  Also the entries small enough not to need a file of
// their own.
//
// The instance is a plrt::dp::DpStrategy behind the opaque PL_Strategy* (strategy::as / handle);
// ddp2's cross-process part is a ddp::DdpStrategy it owns and calls directly, never through a cast.
#include <cstring>

#include "dp_api.hpp"
#include "dp_strategy.hpp"
#include "entry_support.hpp"

namespace plrt::dp {

using plugin::fail;

namespace {

constexpr const char* kFamily = "dp";

DpStrategy* as_dp(PL_Strategy* s) { return strategy::as<DpStrategy>(s); }

template <class Body>
PL_Error* entry(PL_Strategy* s, const char* fn, Body&& body) noexcept {
  return strategy::entry(as_dp(s), kFamily, fn, std::forward<Body>(body));
}

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(as_dp(s), [](DpStrategy& d) { teardown(d); });
}

PL_Error* setup_entry(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return entry(s, "setup", [&](DpStrategy& d) { setup(d, params, num_params); });
}

PL_Error* setup_replica_entry(PL_Strategy* s, int32_t replica, PL_Parameter* params, size_t num_params) {
  return entry(s, "setup_replica", [&](DpStrategy& d) { setup_replica(d, replica, params, num_params); });
}

PL_Error* run_step_entry(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return entry(s, "run_step", [&](DpStrategy& d) {
    strategy::check_step_fn(d.who, fn);
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
    if (d.inner != nullptr) ddp::set_grad_sync(*d.inner, enabled != 0);
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
    strategy::check_process_group_outs(d.who, out_api, out_group);
    *out_api = nullptr;  // dp, and ddp2 with one process: no group
    *out_group = nullptr;
    if (d.inner != nullptr && d.inner->group) {
      *out_api = d.inner->group.api();
      *out_group = d.inner->group.get();
    }
  });
}

PL_Error* get_stat_entry(PL_Strategy* s, const char* name, double* out) {
  return entry(s, "get_stat", [&](DpStrategy& d) {
    std::lock_guard<std::mutex> lock(d.m);
    strategy::answer_stat(d.who, name, out,
                          {{"replicas", static_cast<double>(d.n())},
                           {"steps", static_cast<double>(d.stats.steps)},
                           {"broadcast_ms", d.stats.broadcast_ms},
                           {"reduce_ms", d.stats.reduce_ms},
                           {"allreduce_ms", d.stats.allreduce_ms}});
  });
}

// Metrics and the loss scaler's verdict: ddp2 across processes through its inner ddp (its own
// metrics group); dp is one process, where a reduction is the value itself.
PL_Error* reduce_entry(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op) {
  return entry(s, "reduce", [&](DpStrategy& d) {
    if (tensor == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": reduce: tensor is NULL");
    if (d.inner != nullptr) return ddp::reduce(*d.inner, *tensor, op);
    plugin::check_tensor(tensor, (d.who + ": reduce: tensor").c_str());
    if (op < PL_REDUCE_SUM || op > PL_REDUCE_PRODUCT)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": reduce: op " + std::to_string(op) +
                                        " is not valid (PL_REDUCE_SUM 1, AVG 2, MIN 3, MAX 4, PRODUCT 5)");
  });
}

PL_Error* all_gather_entry(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs) {
  return entry(s, "all_gather", [&](DpStrategy& d) {
    if (input == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": all_gather: input is NULL");
    if (d.inner != nullptr) return ddp::all_gather(*d.inner, *input, outputs, num_outputs);
    plugin::check_tensor(input, (d.who + ": all_gather: input").c_str());
    if (outputs == nullptr || num_outputs != 1)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": all_gather: num_outputs is " + std::to_string(num_outputs) +
                                        " but the world size is 1: one output per rank");
    plugin::check_tensor(&outputs[0], (d.who + ": all_gather: outputs[0]").c_str());
    if (outputs[0].dtype != input->dtype || outputs[0].numel != input->numel)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": all_gather: outputs[0] is " + plugin::describe(outputs[0]) +
                                        " but the input is " + plugin::describe(*input) + " (they must match)");
    const size_t bytes = tensor_bytes(*input);
    if (bytes == 0) return;
    if (outputs[0].device.type == PL_DEVICE_CPU && input->device.type == PL_DEVICE_CPU)
      std::memmove(outputs[0].data, input->data, bytes);
    else
      d.dev.copy(outputs[0].data, outputs[0].device, input->data, input->device, bytes, d.who + ": all_gather");
  });
}

PL_Error* agree_skip_entry(PL_Strategy* s, int32_t found_inf, int32_t* out_skip) {
  return entry(s, "agree_skip", [&](DpStrategy& d) {
    if (out_skip == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": agree_skip: out_skip is NULL");
    // The replicas' gradients were summed into the root's, which the scaler checked: one verdict.
    *out_skip = (d.inner != nullptr ? ddp::agree_skip(*d.inner, found_inf != 0) : found_inf != 0) ? 1 : 0;
  });
}

PL_Error* num_replicas_entry(PL_Strategy* s, int32_t* out) {
  return entry(s, "num_replicas", [&](DpStrategy& d) {
    if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": num_replicas: out must not be NULL");
    *out = static_cast<int32_t>(d.n());
  });
}

}  // namespace

// The options are checked by the parser create uses, so that the two cannot disagree.
PL_Error* Family::launch_info(bool across_processes, const PL_OptionList* options, PL_LaunchInfo* out) noexcept {
  return strategy::launch_guard(kFamily, [&] {
    if (options != nullptr) parse_options(across_processes ? "ddp2" : "dp", across_processes, *options);
    strategy::fill_launch_info(PL_LAUNCH_SINGLE_PROCESS, across_processes, 0, out);
  });
}

PL_Error* Family::create(const char* who, bool across_processes, const PL_Host* host, const PL_StrategyConfig* config,
                         PL_Strategy** out) noexcept {
  return strategy::create(kFamily, who, host, out, [&] {
    return strategy::handle(create_strategy(who, across_processes, host, config).release());
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
  api.on_grad_ready = nullptr;  // nothing to overlap: the sum waits for every replica anyway
  api.set_grad_sync = set_grad_sync_entry;
  api.before_optimizer_step = nullptr;
  api.after_optimizer_step = after_optimizer_step_entry;
  api.process_group = process_group_entry;
  api.get_stat = get_stat_entry;
  api.num_replicas = num_replicas_entry;
  api.setup_replica = setup_replica_entry;
  api.optimizer_step = nullptr;  // the host steps the root's parameters; after_optimizer_step marks them dirty
  api.agree_skip = agree_skip_entry;
  api.reduce = reduce_entry;
  api.all_gather = all_gather_entry;
  api.state_info = nullptr;  // no state of its own
  api.save_state = nullptr;
  api.load_state = nullptr;
  return api;
}

}  // namespace plrt::dp
