// LightningModule::log of a pl::Metric: compute() through the trainer's metric collectives
// (metrics.hpp's Collectives: the strategy's all_gather, else its group), log the value, reset.
#include <algorithm>
#include <plrt/sdk/metric.hpp>
#include <set>
#include <sstream>

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
  Trainer::Impl& t = *trainer_->impl_;
  if (t.in_training_step || t.in_eval_step) {
    // From a step: TorchMetrics' way with on_epoch, computed when the epoch ends (log_step_metrics).
    if (options.on_step.value_or(false) || !options.on_epoch.value_or(true))
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "log('" + name + "', " + metric.name() +
                      ") from a step is computed over the whole epoch when it ends (on_epoch); on_step is not "
                      "supported for a pl::Metric: log a double for a per-step value");
    for (const auto& p : t.step_metrics)
      if (p.name == name) {
        if (p.metric != &metric)
          throw Error(PL_ERR_INVALID_ARGUMENT,
                      "log('" + name + "', ...) was given two different metrics in one epoch; use one name per metric");
        return;
      }
    t.step_metrics.push_back({name, &metric, options});
    return;
  }
  const double value = metric.compute(CollectivesSync(t.collectives()));
  metric.reset();
  LogOptions o = options;
  o.batch_size = 1;  // one value of weight 1: the epoch mean stores it as computed (x·w/w may round)
  log(name, value, o);
}

// The metrics logged from this epoch's steps, computed across the ranks (one allgather of their
// names, then one per metric, in name order; a rank that has not got one takes part with nothing)
// and logged as epoch values, then reset.
void Trainer::Impl::log_step_metrics() {
  std::vector<StepMetric> pending;
  pending.swap(step_metrics);
  plrt::sdk::Collectives c = collectives();
  std::set<std::string> names;
  for (const auto& p : pending) names.insert(p.name);
  if (c.world_size() > 1) {
    std::string mine;
    for (const auto& n : names) mine += n + '\n';
    for (const auto& text : c.allgather(mine)) {
      std::istringstream is(text);
      for (std::string line; std::getline(is, line);) names.insert(line);
    }
  }
  CollectivesSync sync(c);
  for (const auto& name : names) {
    auto it = std::find_if(pending.begin(), pending.end(), [&](const StepMetric& p) { return p.name == name; });
    if (it == pending.end()) {
      if (c.world_size() > 1) c.allgather(std::string());
      continue;
    }
    const double value = it->metric->compute(sync);
    it->metric->reset();
    LogOptions o = it->options;
    o.on_step = false;
    o.on_epoch = true;
    o.batch_size = 1;
    metrics.log(name, value, o, 1, false, rank, c);
  }
}

}  // namespace pl
