// The C boundary of the bagua strategy: every exported entry checks its instance and runs under
// plugin::guard (plrt_strategy_common's entry_support.hpp).  gradient_allreduce's step is ddp's:
// run_step, the bucket hooks, the metrics collectives, the skip agreement and optimizer_step are
// ddp::CoreEntries; setup, teardown and get_stat are bagua's (create and launch_info:
// ddp::CoreFamily over Ops).
#include "bagua_api.hpp"
#include "bagua_strategy.hpp"
#include "core_entries.hpp"
#include "entry_support.hpp"

namespace plrt::bagua {

namespace {

constexpr char kFamily[] = "bagua";
using Core = ddp::CoreEntries<BaguaStrategy, kFamily>;

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(strategy::as<BaguaStrategy>(s), [](BaguaStrategy& d) { ddp::teardown(*d.core); });
}

PL_Error* setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return Core::entry(s, "setup", [&](BaguaStrategy& d) { ddp::setup(*d.core, params, num_params); });
}

PL_Error* teardown(PL_Strategy* s) {
  return Core::entry(s, "teardown", [&](BaguaStrategy& d) { ddp::teardown(*d.core); });
}

// bytes_per_step: what one synced step puts into the gradient collectives (the buckets' bytes);
// grad_comm_ms / exposed_grad_comm_ms: the buckets' communication, and the part of it backward
// did not hide, summed over the steps.
PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return Core::entry(s, "get_stat", [&](BaguaStrategy& d) {
    ddp::DdpStrategy& c = *d.core;
    const reducer::ReducerStats st = c.grads->stats();
    std::lock_guard<std::mutex> lock(c.m);
    const double bucket_bytes = static_cast<double>(c.grads->bucket_bytes());
    strategy::answer_stat(
        d.who, name, out,
        {{"steps", static_cast<double>(st.steps)},
         {"buckets", static_cast<double>(c.grads->num_buckets())},
         {"bucket_bytes", bucket_bytes},
         {"bytes_per_step", c.group ? bucket_bytes : 0.0},
         {"early_launches", static_cast<double>(st.early_launches)},
         {"grad_comm_ms", st.comm_ms},
         {"exposed_grad_comm_ms", st.exposed_ms},
         {"buffer_broadcast_bytes", static_cast<double>(c.opts.broadcast_buffers ? c.buffer_bytes : 0)},
         {"frozen_bytes", static_cast<double>(c.frozen_bytes)}});
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
  Core::fill(api);  // ddp's step, bucket hooks, metrics collectives and skip agreement
  api.destroy = destroy;
  api.setup = setup;
  api.teardown = teardown;
  api.get_stat = get_stat;
  api.optimizer_step = Core::optimizer_step;  // every rank holds the reduced gradients: step them all
  return api;
}

}  // namespace plrt::bagua
