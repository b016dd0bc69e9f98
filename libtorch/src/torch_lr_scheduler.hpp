// A libtorch learning-rate scheduler (torch::optim::LRScheduler, e.g. torch::optim::StepLR) as a
// pl::LRScheduler the Trainer steps and checkpoints (pl::torch::LightningModule's
// configure_torch_lr_schedulers).
//
// Stepping is libtorch's own: step() calls the scheduler's step(), which sets every param group's
// lr, and last_lr() reads group 0's back.  libtorch's schedulers have the semantics of libtorch,
// not of Python's torch.optim: making one does not step it, and its k-th step() sees step count
// k - 1 (torch::optim::StepLR(opt, s, g) first multiplies by g at step s + 1, PyTorch's StepLR at
// step s).
//
// Checkpoints.  libtorch's schedulers save no state; their state is the count of steps.  A resumed
// scheduler (made fresh by configure_torch_lr_schedulers) is stepped that many times and the
// optimizer's learning rates, already loaded from the checkpoint, are put back: a scheduler whose
// state is more than its count would need a pl::LRScheduler of its own.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <plrt/sdk/lr_scheduler.hpp>
#include <string>

#include "torch_optimizer.hpp"

namespace pl::torch::detail {

class TorchLRScheduler final : public pl::LRScheduler {
 public:
  // `scheduler` drives `optimizer.torch()` (libtorch does not say which optimizer a scheduler
  // drives, so that is the caller's word).  Not null (else pl::Error).
  TorchLRScheduler(TorchOptimizer& optimizer, std::unique_ptr<::torch::optim::LRScheduler> scheduler);
  std::string name() const override { return name_; }
  void load_state(const std::map<std::string, double>& state) override;

 private:
  double next_lr(double current_lr) override;  // steps the libtorch scheduler
  TorchOptimizer& torch_opt_;
  std::unique_ptr<::torch::optim::LRScheduler> s_;
  std::string name_;
};

}  // namespace pl::torch::detail
