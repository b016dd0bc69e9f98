// A torch::optim optimizer as the pl::Optimizer the Trainer steps (pl::torch::LightningModule's
// configure_optimizers).  The Trainer names what to step (optimizer.step(): every parameter whose
// gradient was written; a strategy's optimizer_step: whole parameters), this class collects them
// and runs the torch optimizer once, with .grad() undefined on every parameter not named, which
// torch::optim skips as PyTorch's optimizers skip a None gradient.  Checkpoints hold its torch::save
// archive; its lr is the torch optimizer's first param group's, and set_lr keeps the other groups'
// ratios to it.
#pragma once

#include <torch/torch.h>

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

 protected:
  void update(size_t i, int64_t begin, int64_t end) override;
  void finish_updates() override;

 private:
  std::unique_ptr<::torch::optim::Optimizer> opt_;
  std::vector<::torch::Tensor> torch_params_, grads_;
  std::vector<size_t> chosen_;
  std::string name_;
};

}  // namespace pl::torch::detail
