// The C boundary of the bagua strategy: every exported entry checks its instance and runs under
// plugin::guard (plrt_strategy_common's entry_support.hpp).  ddp's entries come through
// ddp::CoreEntries (the bucket hooks, the metrics collectives); the step, the optimizer hooks, the
// skip agreement, sync_weights, checkpoints and get_stat go through the instance's algorithm
// (algorithm.hpp).
// create and launch_info: ddp::CoreFamily over Ops.
#include "bagua_api.hpp"
#include "bagua_strategy.hpp"
#include "core_entries.hpp"
#include "entry_support.hpp"

namespace plrt::bagua {

namespace {

constexpr char kFamily[] = "bagua";
using Core = ddp::CoreEntries<BaguaStrategy, kFamily>;

void stop(BaguaStrategy& d) {
  d.algo->teardown(d);
  ddp::teardown(*d.core);
  d.hier.disconnect();  // after the reducer drained the buckets' work on its groups
}

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(strategy::as<BaguaStrategy>(s), [](BaguaStrategy& d) { stop(d); });
}

PL_Error* setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return Core::entry(s, "setup", [&](BaguaStrategy& d) {
    ddp::setup(*d.core, params, num_params);
    if (d.hier && d.core->group) {
      check_node_sizes(d.who, d.core->group, d.hier.layout(), d.core->dev);
      d.hier.connect(d.host, d.core->group_spec, ".hier" + std::to_string(d.setups), d.algo->needs(), d.core->dev);
    }
    ++d.setups;
    d.algo->setup(d);
  });
}

PL_Error* teardown(PL_Strategy* s) {
  return Core::entry(s, "teardown", [&](BaguaStrategy& d) { stop(d); });
}

PL_Error* run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return Core::entry(s, "run_step", [&](BaguaStrategy& d) { d.algo->run_step(d, fn); });
}

PL_Error* before_optimizer_step(PL_Strategy* s) {
  return Core::entry(s, "before_optimizer_step", [&](BaguaStrategy& d) { d.algo->before_optimizer_step(d); });
}

PL_Error* bind_optimizer(PL_Strategy* s, PL_OptimizerInfo* info) {
  return Core::entry(s, "bind_optimizer", [&](BaguaStrategy& d) {
    if (info == nullptr || info->struct_size < PL_STRUCT_SIZE(PL_OptimizerInfo, first_moment_in_grads))
      plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": bind_optimizer needs a PL_OptimizerInfo of ABI 1.6 or later");
    d.algo->bind_optimizer(d, *info);
  });
}

PL_Error* optimizer_step(PL_Strategy* s, const PL_OptimizerFn* fn) {
  return Core::entry(s, "optimizer_step", [&](BaguaStrategy& d) { d.algo->optimizer_step(d, fn); });
}

PL_Error* after_optimizer_step(PL_Strategy* s) {
  return Core::entry(s, "after_optimizer_step", [&](BaguaStrategy& d) {
    d.algo->after_optimizer_step(d);
    ++d.optimizer_steps;
  });
}

PL_Error* agree_skip(PL_Strategy* s, int32_t found_inf, int32_t* out_skip) {
  return Core::entry(s, "agree_skip", [&](BaguaStrategy& d) {
    if (out_skip == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": agree_skip: out_skip is NULL");
    *out_skip = d.algo->agree_skip(d, found_inf != 0) ? 1 : 0;
  });
}

PL_Error* sync_weights(PL_Strategy* s) {
  return Core::entry(s, "sync_weights", [&](BaguaStrategy& d) { d.algo->sync_weights(d); });
}

PL_Error* state_info(PL_Strategy* s, PL_StrategyStateInfo* out) {
  return Core::entry(s, "state_info", [&](BaguaStrategy& d) {
    if (out == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": state_info: out is NULL");
    out->has_state = d.algo->has_state() ? 1 : 0;
    out->any_world_size = 0;
    if (PL_HAS_FIELD(PL_StrategyStateInfo, out, local_optimizer_state))
      out->local_optimizer_state = d.algo->local_optimizer_state() ? 1 : 0;
  });
}

PL_Error* save_state(PL_Strategy* s, const char* dir) {
  return Core::entry(s, "save_state", [&](BaguaStrategy& d) {
    if (dir == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": save_state: dir is NULL");
    d.algo->save_state(d, dir);
  });
}

PL_Error* load_state(PL_Strategy* s, const char* dir, int32_t saved_world_size) {
  return Core::entry(s, "load_state", [&](BaguaStrategy& d) {
    if (dir == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": load_state: dir is NULL");
    d.algo->load_state(d, dir, saved_world_size);
  });
}

// bytes_per_step: what one synced step puts on the wire (the algorithm's count: compressed for
// bytegrad); grad_comm_ms / exposed_grad_comm_ms: the buckets' communication, and the part of it
// backward did not hide, summed over the steps; then the algorithm's own.
PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return Core::entry(s, "get_stat", [&](BaguaStrategy& d) {
    ddp::DdpStrategy& c = *d.core;
    const reducer::ReducerStats st = c.grads->stats();
    StatList stats;
    {
      std::lock_guard<std::mutex> lock(c.m);
      stats = {{"steps", static_cast<double>(st.steps)},
               {"optimizer_steps", static_cast<double>(d.optimizer_steps)},
               {"buckets", static_cast<double>(c.grads->num_buckets())},
               {"bucket_bytes", static_cast<double>(c.grads->bucket_bytes())},
               // hierarchical: what crosses between the nodes (the leaders' part; none elsewhere)
               {"bytes_per_step", d.hier && !d.hier.leader() ? 0.0 : d.algo->bytes_per_step(d)},
               {"hierarchical", d.hier ? 1.0 : 0.0},
               {"early_launches", static_cast<double>(st.early_launches)},
               {"grad_comm_ms", st.comm_ms},
               {"exposed_grad_comm_ms", st.exposed_ms},
               {"buffer_broadcast_bytes", static_cast<double>(c.opts.broadcast_buffers ? c.buffer_bytes : 0)},
               {"frozen_bytes", static_cast<double>(c.frozen_bytes)}};
    }
    d.algo->add_stats(d, stats);
    strategy::answer_stat(d.who, name, out, stats);
  });
}

}  // namespace

PL_Strategy* Ops::make(const char* who, const PL_Host* host, const PL_StrategyConfig* config) {
  return strategy::handle(create_strategy(who, host, config).release());
}

void Ops::check_options(PL_LaunchMode /*mode*/, const PL_OptionList& options) { parse_options(kFamily, options); }

PL_StrategyApi Ops::table() {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
  Core::fill(api);  // ddp's bucket hooks, metrics collectives and skip agreement
  api.destroy = destroy;
  api.setup = setup;
  api.teardown = teardown;
  api.run_step = run_step;
  api.before_optimizer_step = before_optimizer_step;
  api.optimizer_step = optimizer_step;
  api.bind_optimizer = bind_optimizer;
  api.after_optimizer_step = after_optimizer_step;
  api.state_info = state_info;
  api.save_state = save_state;
  api.load_state = load_state;
  api.get_stat = get_stat;
  api.agree_skip = agree_skip;
  api.sync_weights = sync_weights;
  return api;
}

}  // namespace plrt::bagua
