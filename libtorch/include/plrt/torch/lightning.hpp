// pl::torch::LightningModule: a libtorch module trained by pl::Trainer, Lightning's way.
//
//   struct Net : pl::torch::LightningModule {
//     torch::nn::Linear fc1{nullptr}, fc2{nullptr};
//     Net() { fc1 = register_module("fc1", torch::nn::Linear(64, 32)); ... }
//     torch::Tensor training_step(const pl::torch::Batch& b, int64_t) override {
//       auto loss = torch::nn::functional::cross_entropy(forward(b[0]), b[1]);
//       log("train_loss", loss);
//       return loss;                                   // the Trainer runs backward
//     }
//     std::unique_ptr<torch::optim::Optimizer> configure_optimizers() override {
//       return std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3));
//     }
//   };
//   pl::Trainer trainer(options);                      // the same Trainer as plrt's own modules
//   trainer.fit(net, train_loader, &val_loader);
//
// The module is a torch::nn::Module (register_module, parameters, forward as you write it) and a
// pl::LightningBase (the on_* hooks, log, all_gather, save_hyperparameters, callbacks).  The
// Trainer places it on the job's device, hands its parameters to the strategy (ddp's rank-0
// broadcast and bucketed allreduce start from autograd's AccumulateGrad hooks), calls
// training_step on each batch (pl::DataLoader's, or a libtorch dataset's through
// pl::torch::data_loader in plrt/torch/data.hpp, with the DistributedSampler injected; the batch's
// tensors arrive as torch tensors on the module's device, without a copy), runs backward on the
// returned loss scaled for accumulate_grad_batches, and steps the optimizer configure_optimizers
// returned (any torch::optim optimizer but LBFGS) at each accumulation boundary, after clipping.
// Under ddp_sharded each rank steps its element ranges of the parameters with an optimizer of the
// same class over views of them (SGD, Adam, AdamW, RMSprop, Adagrad).  Checkpoints hold the
// module's state (model.safetensors, PyTorch names) and the optimizer's state by name
// ("state.<i>.exp_avg", ...: resharded to another world size as plrt's own; another optimizer
// class as its torch::save archive).
//
// Precision bf16-mixed / 16-mixed runs each step under libtorch's autocast (bfloat16 on CPU and
// CUDA, float16 on CUDA only, as Lightning), with 16-mixed's loss scaling, unscale and skipped
// steps done by the Trainer on the gradient memory.
//
// Not for this kind of module: dp/ddp2 replicas (one process per device instead), refused by name.
#pragma once

#include <torch/optim/schedulers/step_lr.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <plrt/sdk/lightning_base.hpp>
#include <plrt/sdk/lr_scheduler.hpp>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/trainer_model.hpp>
#include <string>
#include <vector>

namespace pl::torch {

// One batch as training_step gets it: the loader's tensors, in order, on the module's device.
using Batch = std::vector<::torch::Tensor>;

// One libtorch scheduler and when the Trainer steps it, as Lightning's lr_scheduler_config.
struct SchedulerConfig {
  std::unique_ptr<::torch::optim::LRScheduler> scheduler;  // over the optimizer it was given
  std::string interval =
      "epoch";            // "epoch": after each training epoch (and its validation); "step": each optimizer step
  int64_t frequency = 1;  // >= 1: every `frequency` epochs, or batches of the epoch
};

class LightningModule : public ::torch::nn::Module, public pl::LightningBase {
 public:
  // Forward on one batch; returns the loss (a scalar that requires grad).  The Trainer runs its
  // backward: do not call backward() or an optimizer here.
  virtual ::torch::Tensor training_step(const Batch& batch, int64_t batch_idx) = 0;
  // Evaluation and prediction run under torch::NoGradGuard, in eval mode.
  virtual void validation_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  virtual void test_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  // The prediction for one batch (Trainer::predict returns them as pl::Tensors over the same
  // memory); the default throws, asking for an override.
  virtual ::torch::Tensor predict_step(const Batch& batch, int64_t batch_idx);
  // Any torch::optim optimizer over this module's parameters (or some of them), but LBFGS.
  virtual std::unique_ptr<::torch::optim::Optimizer> configure_optimizers() = 0;
  // libtorch's learning-rate schedulers over configure_optimizers' optimizer (given here), e.g.
  //   std::vector<pl::torch::SchedulerConfig> configure_torch_lr_schedulers(torch::optim::Optimizer& o) override {
  //     std::vector<pl::torch::SchedulerConfig> s(1);
  //     s[0].scheduler = std::make_unique<torch::optim::StepLR>(o, 2, 0.5);
  //     return s;
  //   }
  // They keep libtorch's semantics (torch::optim::StepLR(o, s, g) first decays at its step s + 1,
  // Python's at step s) and their step count is checkpointed: a resumed one is stepped that many times
  // (libtorch/src/torch_lr_scheduler.hpp).
  virtual std::vector<SchedulerConfig> configure_torch_lr_schedulers(::torch::optim::Optimizer& optimizer) {
    (void)optimizer;
    return {};
  }
  // plrt's learning-rate schedules, for those libtorch lacks (MultiStepLR, CosineAnnealingLR,
  // OneCycleLR, ReduceLROnPlateau, ...; lr_scheduler.hpp, values equal to Python's): over the
  // optimizer seen as a pl::Optimizer whose lr is the torch optimizer's (its first param group's;
  // the other groups keep their ratios to it).  They step after the libtorch ones.
  virtual std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer& optimizer) {
    (void)optimizer;
    return {};
  }

  using pl::LightningBase::log;
  // Lightning's self.log with a tensor (one element): read only when a reader needs it, so a step
  // does not wait for the device.
  void log(const std::string& name, const ::torch::Tensor& value, const pl::LogOptions& options = {});

  using pl::LightningBase::all_gather;
  // Lightning's self.all_gather: x from every rank (the same shape everywhere), stacked along a new
  // dim 0 in rank order ([world, ...x.shape]; [world] for a 0-d x), on x's device.  It goes
  // through host memory; every rank must call it.
  ::torch::Tensor all_gather(const ::torch::Tensor& x);

  // The trainer's view of this module (libtorch/src/lightning_model.cpp).
  std::unique_ptr<pl::TrainerModel> trainer_model() override;
};

}  // namespace pl::torch
