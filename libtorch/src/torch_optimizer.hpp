// A torch::optim optimizer as the pl::Optimizer the Trainer steps (pl::torch::LightningModule's
// configure_optimizers).
//
// Stepping.  The Trainer names what to step (optimizer.step(): every parameter whose gradient was
// written; a strategy's optimizer_step: whole parameters, or a sharded strategy's element ranges).
// Whole parameters are stepped by the torch optimizer itself, once, with .grad() undefined on every
// parameter not named, which torch::optim skips as PyTorch's optimizers skip a None gradient.  An
// element range [begin, end) of parameter i (ddp_sharded's ZeRO partition) is stepped by a second
// optimizer of the same class (the shard optimizer, made at the first range): its parameter is a
// leaf tensor over those elements of the parameter's memory, its .grad() the same elements of the
// gradient memory, its param group a copy of the parameter's group's options, taken again before
// every step (a scheduler's lr reaches it).  The five optimizers libtorch ships (SGD, Adam, AdamW,
// RMSprop, Adagrad) update elementwise, so a range steps as its elements would in the whole.
//
// State.  For those five the checkpoint holds the state by name, as plrt's own optimizers write
// it, so that the Trainer can reshard it to another partition or world size: "state.<i>.<field>"
// for a whole parameter, "state.<i>.<begin>-<end>.<field>" for a range, with PyTorch's field names
// (exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer, square_avg, grad_avg, sum) and the step
// counts as scalars "state.<i>[.<begin>-<end>].step".  Another torch::optim::Optimizer subclass is
// kept as its torch::save archive (kArchiveKey) and steps whole parameters only (a range is an
// error naming it).  An archive saved by an earlier plrt loads into any of them.
//
// Learning rate: the first param group's; set_lr keeps the other groups' ratios to it.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <plrt/sdk/optim.hpp>
#include <string>
#include <vector>

namespace pl::torch::detail {

class TorchOptimizer final : public pl::Optimizer {
 public:
  // params[i] is the Trainer's record of torch_params[i], whose gradient memory is grads[i].
  TorchOptimizer(std::unique_ptr<::torch::optim::Optimizer> opt, std::vector<pl::Parameter*> params,
                 std::vector<::torch::Tensor> torch_params, std::vector<::torch::Tensor> grads);
  ~TorchOptimizer() override;
  std::string name() const override { return name_; }
  std::vector<std::pair<std::string, std::string>> hyperparameters() const override;
  double lr() const override;
  void set_lr(double lr) override;
  std::vector<std::pair<std::string, pl::Tensor>> state_tensors() const override;
  std::map<std::string, double> state_scalars() const override;
  void load_state(const std::map<std::string, pl::Tensor>& tensors,
                  const std::map<std::string, double>& scalars) override;

  ::torch::optim::Optimizer& torch() const { return *opt_; }

  static constexpr const char* kArchiveKey = "torch_optim_archive";  // the torch::save bytes (u8)

  enum class Kind {
    kSGD,
    kAdam,
    kAdamW,
    kRMSprop,
    kAdagrad,
    kOther
  };

 protected:
  void update(size_t i, int64_t begin, int64_t end) override;
  void finish_updates() override;

 private:
  struct Range {
    ::torch::Tensor value, grad;  // leaf views of the parameter's and the gradient's elements
    size_t group = 0;             // its param group in shard_
  };
  Range& range(const RangeKey& k);  // made (and added to shard_) on first use
  void step_whole();
  void step_ranges();
  void load_archive(const pl::Tensor& bytes);
  void load_named(const std::map<std::string, pl::Tensor>& tensors, const std::map<std::string, double>& rest);

  std::unique_ptr<::torch::optim::Optimizer> opt_, shard_;
  std::vector<::torch::Tensor> torch_params_, grads_;
  std::vector<size_t> group_of_;  // parameter i's param group in opt_
  std::map<RangeKey, Range> ranges_;
  std::vector<size_t> chosen_;
  std::vector<RangeKey> chosen_ranges_;
  Kind kind_;
  std::string name_;
};

}  // namespace pl::torch::detail
