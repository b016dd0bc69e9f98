// pl::LightningModule: a Module with Lightning's step hooks and optimizer configuration (its
// other hooks, logging and hyperparameters are LightningBase's, lightning_base.hpp).  There is no autograd:
// training_step runs forward AND backward (the layers' backward calls, see nn.hpp) and returns the loss; the trainer
// drives everything else (device placement, distributed sampling, gradient sync, optimizer steps, accumulation,
// checkpoints).
#pragma once

#include <memory>
#include <optional>
#include <plrt/sdk/callback.hpp>
#include <plrt/sdk/data.hpp>
#include <plrt/sdk/lightning_base.hpp>
#include <plrt/sdk/lr_scheduler.hpp>
#include <plrt/sdk/module.hpp>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/scalar.hpp>
#include <string>
#include <vector>

namespace pl {

// One replica's part of a step, as training_step_end, validation_step_end and test_step_end
// receive it (dp, ddp2: one per device of the process that got rows, in replica order; other
// strategies: one, with the whole batch).
struct ReplicaOutput {
  int replica = 0;         // 0: the root device, where the optimizer steps
  int64_t batch_size = 0;  // rows of the batch this replica got
  Batch batch;             // that slice of the batch (on the replica's device), e.g. for its labels
  Scalar loss;             // what training_step returned (one-phase training steps; 0 in evaluation)
  Tensor output;           // two-phase steps: what forward_step returned, copied to the root device
                           // (undefined for one-phase steps)
  Tensor output_grad;      // two-phase training steps: training_step_end sets d(loss)/d(output) here
                           // (any device); unused in evaluation
};

// One learning-rate schedule and when the Trainer steps it (Lightning's lr_scheduler_config).
// Exactly one of `scheduler` and `plateau`, made over the optimizer configure_lr_schedulers is given.
struct LRSchedulerConfig {
  std::shared_ptr<LRScheduler> scheduler;
  std::shared_ptr<ReduceLROnPlateau> plateau;
  std::string interval = "epoch";  // "epoch": after each training epoch (and its validation); "step":
                                   // after each optimizer step
  int64_t frequency = 1;           // >= 1: every `frequency` epochs, or batches of the epoch
  std::string monitor;             // plateau: the logged value it watches (required), e.g. "val_loss"
  bool strict = true;              // plateau: a monitor not logged is an error (false: warn, skip)
};

class LightningModule : public Module, public LightningBase {
 public:
  // Forward and backward on one batch (already on the module's device); returns the loss, as a
  // double or as a deferred pl::Scalar (nn::cross_entropy's loss: the step then need not wait for
  // the device; scalar.hpp).  Under dp/ddp2 each replica runs it on its slice of the batch, in its
  // own thread.
  virtual Scalar training_step(const Batch& batch, int64_t batch_idx) = 0;

  // ---- several replicas per process (dp, ddp2) ----
  // A new module of the same architecture, for one more device; the trainer overwrites its values
  // from this module before each step, so its initial values do not matter.  Only dp and ddp2 call
  // it; the default throws, asking for an override such as
  //   std::unique_ptr<pl::LightningModule> replicate() const override { return std::make_unique<MyModel>(config_); }
  // Values a replica assigns during a step (its buffers, its members) are not kept, as in Lightning.
  virtual std::unique_ptr<LightningModule> replicate() const;
  // Lightning's training_step_end: every replica's output of this step, in replica order, on the
  // root's thread after they all finished; returns the step's loss.  Default: the mean of the
  // replicas' losses, which is what their gradients already are (the trainer weighs each replica
  // 1/replicas, as Lightning's dp averages), so an override of a one-phase step changes the
  // reported loss only.  Two-phase steps (split_step) must override it to set every output_grad.
  virtual Scalar training_step_end(std::vector<ReplicaOutput>& outputs);
  // Two-phase steps, for a loss over the whole batch under dp/ddp2 (the seed docs' softmax across
  // replicas): when split_step() is true, the trainer calls forward_step on every replica (no
  // backward), training_step_end with all outputs (it computes the loss and sets each
  // output_grad), then backward_step(output_grad) on every replica; training_step is not called.
  // A hand-written output_grad under 16-mixed must be multiplied by pl::amp::loss_scale().
  // Validation and test call forward_step too (in eval mode, no backward) when split_eval_step()
  // is true; see validation_step_end.
  virtual bool split_step() const { return false; }
  virtual Tensor forward_step(const Batch& batch, int64_t batch_idx);
  virtual void backward_step(const Tensor& output_grad);
  virtual void validation_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  virtual void test_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  // Lightning's predict_step: the prediction for one batch, which Trainer::predict collects.  The
  // default throws, asking for an override (plrt's modules have no generic forward).
  virtual Tensor predict_step(const Batch& batch, int64_t batch_idx);
  // Lightning's validation_step_end / test_step_end: called once per batch on the root's thread,
  // after every replica's part, with one output per replica that got rows (dp/ddp2 split each
  // batch over their devices as in training; every other strategy gives one output, the whole
  // batch: it is called regardless of the backend).  What it logs is the whole batch's (its
  // rows are the epoch-mean weight).  Default: nothing.
  //   One-phase (default): each replica ran validation_step / test_step on its slice, in its own
  //   thread; their log() calls were merged as training's are (reduce_fx across replicas, the
  //   mean weighted by rows) before this is called; every `output` is undefined.
  //   Two-phase (split_eval_step() true), for a metric over the whole batch (the seed docs'
  //   softmax across replicas): each replica runs forward_step on its slice in eval mode INSTEAD
  //   of validation_step / test_step, and outputs[r].output is its result copied to the root's
  //   device, e.g. for softmax over the concatenated logits and accuracy over the whole batch.
  virtual void validation_step_end(std::vector<ReplicaOutput>& outputs) { (void)outputs; }
  virtual void test_step_end(std::vector<ReplicaOutput>& outputs) { (void)outputs; }
  virtual bool split_eval_step() const { return false; }
  virtual std::unique_ptr<Optimizer> configure_optimizers() = 0;
  // The learning-rate schedules of the optimizer configure_optimizers returned (Lightning's
  // "lr_scheduler" entries of configure_optimizers' dict), made after it; none by default.
  virtual std::vector<LRSchedulerConfig> configure_lr_schedulers(Optimizer& optimizer) {
    (void)optimizer;
    return {};
  }

  // The trainer's view of this module (module_model.cpp).
  std::unique_ptr<TrainerModel> trainer_model() override;
};

}  // namespace pl
