// pl::LearningRateMonitor: Lightning's LearningRateMonitor callback.  Writes the optimizer's
// learning rate to the loggers (metrics.csv, TensorBoard) as "lr-<Optimizer>" ("lr-SGD", "lr-Adam"),
// and with log_momentum its momentum as "lr-<Optimizer>-momentum" (SGD's momentum, Adam's beta1; 0
// when it has none).  The rows go to the loggers only (not callback_metrics), with the step of the
// optimizer step the rate is used for.
//   logging_interval "step": before every log_every_n_steps-th optimizer step;
//   "epoch": at every training epoch's start;
//   "" (Lightning's None): as each schedule steps ("step" or "epoch" interval), and per step when
//   no schedule drives the optimizer.
#pragma once

#include <cstdint>
#include <plrt/sdk/callback.hpp>
#include <string>

namespace pl {

class LearningRateMonitor : public Callback {
 public:
  // logging_interval: "", "step" or "epoch"; anything else is an error naming it.
  explicit LearningRateMonitor(std::string logging_interval = "", bool log_momentum = false);
  const std::string& logging_interval() const { return interval_; }

  void on_train_epoch_start(Trainer& trainer, LightningBase& module) override;
  void on_train_batch_start(Trainer& trainer, LightningBase& module, const Batch& batch, int64_t batch_idx) override;

 private:
  void log_rates(Trainer& trainer);
  std::string interval_;
  bool momentum_;
  int64_t last_step_ = -1;  // the step a "step" row was written for
};

}  // namespace pl
