// The trainer's side of a module's ModuleLink (module_link.hpp): LightningBase::log of values and
// pl::Metrics.
#include "trainer_impl.hpp"

namespace pl {

void Trainer::Impl::log_value(const std::string& name, const Scalar& value, const LogOptions& options) {
  if (t_current_replica >= 0 && static_cast<size_t>(t_current_replica) < replica_logs.size()) {
    // a replica's thread in a dp/ddp2 step: kept aside, merged across replicas after the step
    replica_logs[static_cast<size_t>(t_current_replica)].push_back({name, value, options, options.batch_size});
    return;
  }
  metrics.log(name, value, options, options.batch_size > 0 ? options.batch_size : batch_size, in_training_step, rank,
              collectives());
}

void Trainer::Impl::log_metric(const std::string& name, Metric& metric, const LogOptions& options) {
  if (t_current_replica >= 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', " + metric.name() +
                                             ") from a dp/ddp2 replica's step: a metric is combined across "
                                             "ranks, so log it from on_*_epoch_end (update it in the step)");
  if (in_training_step || in_eval_step) {
    // From a step: TorchMetrics' way with on_epoch, computed when the epoch ends (MetricLog::reduce_epoch).
    if (options.on_step.value_or(false) || !options.on_epoch.value_or(true))
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "log('" + name + "', " + metric.name() +
                      ") from a step is computed over the whole epoch when it ends (on_epoch); on_step is not "
                      "supported for a pl::Metric: log a double for a per-step value");
    metrics.log_metric(name, metric, options);
    return;
  }
  const double value = metric.compute(plrt::sdk::CollectivesSync(collectives()));
  metric.reset();
  LogOptions o = options;
  o.batch_size = 1;  // one value of weight 1: the epoch mean stores it as computed (x·w/w may round)
  log_value(name, value, o);
}

}  // namespace pl
