// pl::TrainerModel: what pl::Trainer's loop knows of a model, one object per replica.  It is the
// seam between the loop and a kind of module: the loop (placement, the strategy's parameter
// entries, the step, evaluation, prediction, checkpoints, dp/ddp2's replicas) calls only this, and
// each kind of module has one adapter:
//
//   pl::LightningModule (plrt's own layers, explicit backward)  → the SDK's ModuleModel
//   a libtorch module (autograd)                                  → plrt::torch's adapter
//
// Tensors cross the seam as pl::Tensor and pl::Parameter (a value, its gradient and two flags):
// an adapter presents its model's memory in those terms, and the loop, the strategy, the
// optimizer, clipping and the loss scaler work on them without knowing the module's kind.
//
// Scaling is the loop's decision and the adapter's work: each step receives its StepScales (the
// gradient factor 1/accumulate_grad_batches (1/replicas too under dp), the 16-mixed loss scale, the
// autocast dtype) and applies them as its kind must (plrt's layers: Module::set_grad_scale and
// pl::amp::Autocast; autograd: the loss tensor multiplied before backward).
//
// Threads: under dp/ddp2 replica r's step runs on the strategy's thread for r; everything else on
// the thread that called fit/validate/test/predict.  Errors are pl::Error.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <plrt/sdk/data.hpp>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/module.hpp>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/scalar.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl {

// How one step scales what it computes (see above).
struct StepScales {
  double grad = 1.0;                    // the factor on every gradient this step writes
  double loss = 1.0;                    // 16-mixed's loss scale (1 otherwise): the backward starts from loss × this
  PL_DType compute = PL_DTYPE_INVALID;  // autocast's dtype: PL_F16, PL_BF16, or none (32-true)
};

class TrainerModel {
 public:
  virtual ~TrainerModel() = default;
  // The module's class, for the profiler's action names and messages.
  virtual std::string type_name() const = 0;

  // What this kind cannot train with, refused when the trainer attaches it (before any work):
  // `precision` is the job's ("16-mixed", ...), `compute` its autocast dtype (PL_DTYPE_INVALID for
  // 32-true).  Default: every precision.
  virtual void check_precision(const std::string& precision, PL_DType compute) const { (void)precision, (void)compute; }

  // ---- tensors ----
  // Moves every parameter, gradient and buffer to `device` of `acc` and allocates the gradients of
  // the parameters that require one.  The records parameters() and buffers() returned before are
  // invalid afterwards.
  virtual void place(const Accelerator& acc, PL_Device device) = 0;
  // Parameters, then buffers, each with its dotted name, in PyTorch's order (a module's own, then
  // its children's).  The records are the model's (the loop and the strategy read and write them
  // in place) and stay valid until the next place() or the model's destruction.
  virtual std::vector<std::pair<std::string, Parameter*>> parameters() = 0;
  virtual std::vector<std::pair<std::string, Tensor*>> buffers() = 0;
  // hook(i) once parameters()[i]'s gradient of this backward is final (the strategy may start
  // communicating it); an empty function unhooks.
  virtual void set_grad_ready_hook(std::function<void(size_t)> hook) = 0;
  virtual void train(bool on) = 0;
  virtual bool training() const = 0;
  // Every gradient marked unwritten (the next backward writes instead of adding).
  virtual void zero_grad() = 0;
  // Zeros, and marks written, every trainable gradient this step did not write (a replica's
  // gradients are summed by the strategy, so each must hold a value).
  virtual void fill_unwritten_grads() = 0;
  // The checkpoint's model state: named tensors (the model's own storage), and their load.
  // strict: a missing or unexpected name throws, naming them; shapes and dtypes always must match.
  virtual std::vector<std::pair<std::string, Tensor>> state_dict() = 0;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state, bool strict) = 0;
  // Lightning's model summary rows: the submodules down to max_depth (-1: every depth), depth
  // first, each with its dotted name, its class name without namespaces and its parameter count.
  struct Submodule {
    std::string name, type;
    int64_t params = 0;
  };
  virtual std::vector<Submodule> submodules(int max_depth) = 0;
  // dp/ddp2: a new model of the same architecture, linked to `trainer` (its log() calls reach it);
  // its values are overwritten from the root before it steps.
  virtual std::unique_ptr<TrainerModel> replicate(Trainer* trainer) const = 0;

  // ---- the steps ----
  // Forward and backward on one batch (on the model's device); the gradients are added (or
  // written after zero_grad) scaled as `s` says.  Returns the loss, unscaled.
  virtual Scalar training_step(const Batch& batch, int64_t batch_idx, const StepScales& s) = 0;
  // Two-phase steps (LightningModule::split_step): forward only, the root's loss over every
  // replica's output, then backward from each output's gradient.  A kind without them returns
  // false from split_step and is never asked for the others.
  virtual bool split_step() const { return false; }
  virtual Tensor forward_step(const Batch& batch, int64_t batch_idx, const StepScales& s);
  virtual void backward_step(const Tensor& output_grad, const StepScales& s);
  // On the root, after every replica's part: the step's loss (one-phase: by default the replicas'
  // mean); two-phase: also every output_grad.
  virtual Scalar training_step_end(std::vector<ReplicaOutput>& outputs, const StepScales& s) = 0;
  // Validation (test false) or test on one batch, or its forward_step when split_eval_step().
  virtual bool split_eval_step() const { return false; }
  virtual void eval_step(ReplicaOutput& out, int64_t batch_idx, bool test, PL_DType compute) = 0;
  virtual void eval_step_end(std::vector<ReplicaOutput>& outputs, bool test, PL_DType compute) = 0;
  virtual Tensor predict_step(const Batch& batch, int64_t batch_idx, PL_DType compute) = 0;

  // ---- optimization (configure_optimizers, in terms the loop steps) ----
  virtual std::unique_ptr<Optimizer> configure_optimizers() = 0;
  virtual std::vector<LRSchedulerConfig> configure_lr_schedulers(Optimizer& optimizer) = 0;
};

}  // namespace pl
