// The algorithms' shared defaults, and the choice of one by option.
#include "algorithm.hpp"

#include "bagua_strategy.hpp"
#include "plugin_support.hpp"

namespace plrt::bagua {

void Algorithm::setup(BaguaStrategy& s) { (void)s; }
void Algorithm::run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn) { ddp::run_step(*s.core, fn); }
void Algorithm::before_optimizer_step(BaguaStrategy& s) { (void)s; }
void Algorithm::bind_optimizer(BaguaStrategy& s, PL_OptimizerInfo& info) {
  (void)s;
  (void)info;
}
bool Algorithm::agree_skip(BaguaStrategy& s, bool found_inf) { return ddp::agree_skip(*s.core, found_inf); }
void Algorithm::optimizer_step(BaguaStrategy& s, const PL_OptimizerFn* fn) { ddp::optimizer_step(*s.core, fn); }
void Algorithm::after_optimizer_step(BaguaStrategy& s) { (void)s; }
void Algorithm::sync_weights(BaguaStrategy& s) { (void)s; }
void Algorithm::teardown(BaguaStrategy& s) noexcept { (void)s; }
void Algorithm::save_state(BaguaStrategy& s, const std::string& dir) {
  (void)dir;
  plugin::fail(PL_ERR_INTERNAL,
               s.who + ": save_state: algorithm " + algorithm_name(s.opts.algorithm) + " keeps no state");
}
void Algorithm::load_state(BaguaStrategy& s, const std::string& dir, int32_t saved_world) {
  (void)dir;
  (void)saved_world;
  plugin::fail(PL_ERR_INTERNAL,
               s.who + ": load_state: algorithm " + algorithm_name(s.opts.algorithm) + " keeps no state");
}
double Algorithm::bytes_per_step(const BaguaStrategy& s) const {
  return s.core->group ? static_cast<double>(s.core->grads->bucket_bytes()) : 0.0;
}
void Algorithm::add_stats(const BaguaStrategy& s, StatList& out) const {
  (void)s;
  (void)out;
}

std::unique_ptr<Algorithm> make_algorithm(const BaguaOptions& opts, const PL_StrategyConfig& config,
                                          const Scope& scope) {
  switch (opts.algorithm) {
    case AlgorithmId::kGradientAllreduce:
      return make_gradient_allreduce(opts, config, scope);
    case AlgorithmId::kByteGrad:
      return make_bytegrad(opts, config, scope);
    case AlgorithmId::kQAdam:
      return make_qadam(opts, config, scope);
    case AlgorithmId::kDecentralized:
      return make_decentralized(opts, config, scope);
    case AlgorithmId::kLowPrecisionDecentralized:
      return make_low_precision_decentralized(opts, config, scope);
    case AlgorithmId::kAsync:
      return make_async(opts, config, scope);
    default:
      break;
  }
  plugin::fail(PL_ERR_INTERNAL, std::string("bagua: algorithm ") + algorithm_name(opts.algorithm) + " is not built");
}

}  // namespace plrt::bagua
