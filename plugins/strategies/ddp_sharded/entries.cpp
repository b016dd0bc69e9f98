// The C boundary of the ddp_sharded strategies (ABI 1.5): every exported entry checks its instance
// and runs under plugin::guard (plrt_strategy_common's entry_support.hpp).  Whatever is ddp's —
// run_step with its buffer broadcast, the bucket hooks, the metrics collectives, the skip
// agreement — is ddp::CoreEntries (../ddp/core_entries.hpp); setup, optimizer_step, owned_ranges
// and get_stat are the shard's.
#include <cstring>

#include "core_entries.hpp"
#include "entry_support.hpp"
#include "sharded_api.hpp"
#include "sharded_strategy.hpp"

namespace plrt::ddp_sharded {

using plugin::fail;
using strategy::check;

namespace {

constexpr char kFamily[] = "ddp_sharded";
using Core = ddp::CoreEntries<ShardedStrategy, kFamily>;

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(strategy::as<ShardedStrategy>(s), [](ShardedStrategy& d) { teardown(d); });
}

PL_Error* setup_entry(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return Core::entry(s, "setup", [&](ShardedStrategy& d) { setup(d, params, num_params); });
}

PL_Error* teardown_entry(PL_Strategy* s) {
  return Core::entry(s, "teardown", [&](ShardedStrategy& d) { teardown(d); });
}

PL_Error* optimizer_step_entry(PL_Strategy* s, const PL_OptimizerFn* fn) {
  return Core::entry(s, "optimizer_step", [&](ShardedStrategy& d) { optimizer_step(d, fn); });
}

PL_Error* owned_ranges(PL_Strategy* s, PL_ParamRange* out, size_t capacity, size_t* out_count) {
  return Core::entry(s, "owned_ranges", [&](ShardedStrategy& d) {
    if (out_count == nullptr) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": owned_ranges: out_count is NULL");
    if (capacity > 0 && out == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, d.who + ": owned_ranges: out is NULL for capacity " + std::to_string(capacity));
    std::lock_guard<std::mutex> lock(d.core->m);
    if (!d.core->set_up) fail(PL_ERR_INVALID_ARGUMENT, d.who + ": owned_ranges was called before setup");
    const size_t n = std::min(capacity, d.owned.size());
    for (size_t k = 0; k < n; ++k)
      if (out[k].struct_size < PL_STRUCT_SIZE(PL_ParamRange, end))
        fail(PL_ERR_VERSION, d.who + ": owned_ranges: out[" + std::to_string(k) + "].struct_size " +
                                 std::to_string(out[k].struct_size) + " is smaller than ABI 1.4's " +
                                 std::to_string(PL_STRUCT_SIZE(PL_ParamRange, end)));
    for (size_t k = 0; k < n; ++k) {
      const size_t size = std::min(out[k].struct_size, sizeof(PL_ParamRange));
      PL_ParamRange r = d.owned[k];
      r.struct_size = size;
      std::memcpy(&out[k], &r, size);
    }
    *out_count = d.owned.size();
  });
}

PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return Core::entry(s, "get_stat", [&](ShardedStrategy& d) {
    ddp::DdpStrategy& c = *d.core;
    const reducer::ReducerStats st = c.grads->stats();
    std::lock_guard<std::mutex> lock(c.m);
    const double grad_bytes = static_cast<double>(d.opts.stage == 2 ? d.owned_bytes : d.trainable_bytes);
    strategy::answer_stat(
        d.who, name, out,
        {{"stage", static_cast<double>(d.opts.stage)},
         {"steps", static_cast<double>(st.steps)},
         {"optimizer_steps", static_cast<double>(d.stats.optimizer_steps)},
         {"buckets", static_cast<double>(c.grads->num_buckets())},
         {"bucket_bytes", static_cast<double>(c.grads->bucket_bytes())},
         {"comm_buffer_bytes", static_cast<double>(c.grads->buffer_bytes())},
         {"owned_ranges", static_cast<double>(d.owned.size())},
         {"owned_param_bytes", static_cast<double>(d.owned_bytes)},
         {"grad_bytes", grad_bytes},
         {"param_bytes", static_cast<double>(d.param_bytes)},
         {"trainable_bytes", static_cast<double>(d.trainable_bytes)},
         {"early_launches", static_cast<double>(st.early_launches)},
         {"grad_comm_ms", st.comm_ms},
         {"exposed_grad_comm_ms", st.exposed_ms},
         {"allgather_ms", d.stats.allgather_ms},
         {"buffer_broadcast_bytes", static_cast<double>(c.opts.broadcast_buffers ? c.buffer_bytes : 0)},
         {"frozen_bytes", static_cast<double>(c.frozen_bytes)}});
  });
}

}  // namespace

PL_Strategy* Ops::make(const char* who, const PL_Host* host, const PL_StrategyConfig* config) {
  return strategy::handle(create_strategy(who, host, config).release());
}

void Ops::check_options(PL_LaunchMode mode, const PL_OptionList& options) {
  parse_options(mode == PL_LAUNCH_SPAWN ? "ddp_sharded_spawn" : "ddp_sharded", options);
}

PL_StrategyApi Ops::table() {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
  Core::fill(api);  // ddp's step, bucket hooks, metrics collectives and skip agreement
  api.destroy = destroy;
  api.setup = setup_entry;
  api.teardown = teardown_entry;
  api.before_optimizer_step = nullptr;
  api.after_optimizer_step = nullptr;  // optimizer_step gathers the parameters itself
  api.get_stat = get_stat;
  api.num_replicas = nullptr;
  api.setup_replica = nullptr;
  api.optimizer_step = optimizer_step_entry;
  api.state_info = nullptr;  // the optimizer's shard is the host's (one optimizer file per rank)
  api.save_state = nullptr;
  api.load_state = nullptr;
  api.owned_ranges = owned_ranges;
  return api;
}

}  // namespace plrt::ddp_sharded
