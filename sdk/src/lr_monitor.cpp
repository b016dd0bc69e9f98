// pl::LearningRateMonitor (lr_monitor.hpp): the optimizer's rate (and momentum) written to the
// loggers when Lightning's callback writes them.
#include <plrt/sdk/lr_monitor.hpp>

#include "trainer_impl.hpp"

namespace pl {

LearningRateMonitor::LearningRateMonitor(std::string logging_interval, bool log_momentum)
    : interval_(std::move(logging_interval)), momentum_(log_momentum) {
  if (interval_ != "" && interval_ != "step" && interval_ != "epoch")
    throw Error(PL_ERR_INVALID_ARGUMENT, "LearningRateMonitor logging_interval '" + interval_ +
                                             "' is not valid; valid: step, epoch, or \"\" (as the schedules step)");
}

void LearningRateMonitor::log_rates(Trainer& trainer) {
  Optimizer* opt = trainer.optimizer();
  if (opt == nullptr) return;
  const std::string key = "lr-" + opt->name();
  std::map<std::string, double> row{{key, opt->lr()}};
  if (momentum_) row[key + "-momentum"] = opt->has_momentum() ? opt->momentum() : 0.0;
  trainer.log_metrics(row);
}

namespace {

// "" (Lightning's None): the interval of the schedules; per step when there is none.
bool logs_at(const Trainer& trainer, const std::string& interval, const std::string& when) {
  if (!interval.empty()) return interval == when;
  const auto& s = trainer.lr_scheduler_configs();
  if (s.empty()) return when == "step";
  for (const auto& c : s)
    if (c.interval == when) return true;
  return false;
}

}  // namespace

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, LightningBase&) {
  if (logs_at(trainer, interval_, "epoch")) log_rates(trainer);
}

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, LightningBase&, const Batch&, int64_t) {
  if (!logs_at(trainer, interval_, "step")) return;
  const int64_t step = trainer.global_step();  // the optimizer step this batch works towards
  if (step == last_step_ || (step + 1) % trainer.options().log_every_n_steps != 0) return;
  last_step_ = step;
  log_rates(trainer);
}

}  // namespace pl
