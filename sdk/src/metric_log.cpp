// LightningBase::log of a pl::Metric: its checks here, the rest by the trainer
// (ModuleLink::log_metric: compute() through the metric collectives, log the value, reset).
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/metric.hpp>

#include "module_link.hpp"

namespace pl {

void LightningBase::log(const std::string& name, Metric& metric, const LogOptions& options) {
  if (link_ == nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', " + metric.name() +
                                             ") needs a trainer: call it from on_*_epoch_end while "
                                             "Trainer::fit/validate/test runs");
  if (options.sync_dist)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', " + metric.name() +
                                             ", sync_dist=true): a metric is already combined across every rank; "
                                             "leave sync_dist false");
  link_->log_metric(name, metric, options);
}

}  // namespace pl
