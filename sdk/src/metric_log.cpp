// LightningModule::log of a pl::Metric: compute() through the trainer's metric collectives
// (metrics.hpp's Collectives: the strategy's all_gather, else its group), log the value, reset.
#include <plrt/sdk/metric.hpp>

#include "trainer_impl.hpp"

namespace pl {

namespace {

// The trainer's collectives as a MetricSync.
class CollectivesSync : public MetricSync {
 public:
  explicit CollectivesSync(plrt::sdk::Collectives c) : c_(std::move(c)) {}
  int world_size() const override { return c_.world_size(); }
  std::vector<std::string> allgather(const std::string& bytes) const override { return c_.allgather(bytes); }

 private:
  plrt::sdk::Collectives c_;
};

}  // namespace

void LightningModule::log(const std::string& name, Metric& metric, const LogOptions& options) {
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
  const double value = metric.compute(CollectivesSync(trainer_->impl_->collectives()));
  metric.reset();
  LogOptions o = options;
  o.batch_size = 1;  // one value of weight 1: the epoch mean stores it as computed (x·w/w may round)
  log(name, value, o);
}

}  // namespace pl
