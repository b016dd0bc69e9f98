// LightningModule::log of a pl::Metric: compute() through the trainer's metric collectives
// (metrics.hpp's Collectives: the strategy's all_gather, else its group), log the value, reset.
#include <plrt/sdk/metric.hpp>

#include "trainer_impl.hpp"

namespace pl {

void LightningBase::log(const std::string& name, Metric& metric, const LogOptions& options) {
  if (trainer_ == nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', " + metric.name() +
                                             ") needs a trainer: call it from on_*_epoch_end while "
                                             "Trainer::fit/validate/test runs");
  if (t_current_replica >= 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', " + metric.name() +
                                             ") from a dp/ddp2 replica's step: a metric is combined across "
                                             "ranks, so log it from on_*_epoch_end (update it in the step)");
  if (options.sync_dist)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', " + metric.name() +
                                             ", sync_dist=true): a metric is already combined across every rank; "
                                             "leave sync_dist false");
  Trainer::Impl& t = *trainer_->impl_;
  if (t.in_training_step || t.in_eval_step) {
    // From a step: TorchMetrics' way with on_epoch, computed when the epoch ends (MetricLog::reduce_epoch).
    if (options.on_step.value_or(false) || !options.on_epoch.value_or(true))
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "log('" + name + "', " + metric.name() +
                      ") from a step is computed over the whole epoch when it ends (on_epoch); on_step is not "
                      "supported for a pl::Metric: log a double for a per-step value");
    t.metrics.log_metric(name, metric, options);
    return;
  }
  const double value = metric.compute(plrt::sdk::CollectivesSync(t.collectives()));
  metric.reset();
  LogOptions o = options;
  o.batch_size = 1;  // one value of weight 1: the epoch mean stores it as computed (x·w/w may round)
  log(name, value, o);
}

}  // namespace pl
