// The TrainerModel of a pl::LightningModule (trainer_model.hpp): plrt's own layers, whose backward
// is explicit (training_step runs it) and which read their scaling from the module's root
// (Module::set_grad_scale) and from the thread's pl::amp::Autocast (the loss scale, the compute dtype).
#pragma once

#include <memory>
#include <plrt/sdk/trainer_model.hpp>

namespace plrt::sdk {

class ModuleModel final : public pl::TrainerModel {
 public:
  // Drives `m` (the program's; it must outlive this object).
  explicit ModuleModel(pl::LightningModule& m) : m_(&m) {}
  // Owns `m` (a dp/ddp2 replica).
  explicit ModuleModel(std::unique_ptr<pl::LightningModule> m) : owned_(std::move(m)), m_(owned_.get()) {}
  ~ModuleModel() override;

  std::string type_name() const override;
  void place(const pl::Accelerator& acc, PL_Device device) override { m_->to(acc, device); }
  std::vector<std::pair<std::string, pl::Parameter*>> parameters() override { return m_->named_parameters(); }
  std::vector<std::pair<std::string, pl::Tensor*>> buffers() override { return m_->named_buffers(); }
  void set_grad_ready_hook(std::function<void(size_t)> hook) override;
  void train(bool on) override { m_->train(on); }
  bool training() const override { return m_->training(); }
  void zero_grad() override { m_->zero_grad(); }
  void fill_unwritten_grads() override;
  std::vector<std::pair<std::string, pl::Tensor>> state_dict() override { return m_->state_dict(); }
  void load_state_dict(const std::map<std::string, pl::Tensor>& state, bool strict) override {
    m_->load_state_dict(state, strict);
  }
  std::vector<Submodule> submodules(int max_depth) override;
  std::unique_ptr<pl::TrainerModel> replicate(pl::Trainer* trainer) const override;

  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx, const pl::StepScales& s) override;
  bool split_step() const override { return m_->split_step(); }
  pl::Tensor forward_step(const pl::Batch& batch, int64_t batch_idx, const pl::StepScales& s) override;
  void backward_step(const pl::Tensor& output_grad, const pl::StepScales& s) override;
  pl::Scalar training_step_end(std::vector<pl::ReplicaOutput>& outputs, const pl::StepScales& s) override;
  bool split_eval_step() const override { return m_->split_eval_step(); }
  void eval_step(pl::ReplicaOutput& out, int64_t batch_idx, bool test, PL_DType compute) override;
  void eval_step_end(std::vector<pl::ReplicaOutput>& outputs, bool test, PL_DType compute) override;
  pl::Tensor predict_step(const pl::Batch& batch, int64_t batch_idx, PL_DType compute) override;

  std::unique_ptr<pl::Optimizer> configure_optimizers() override { return m_->configure_optimizers(); }
  std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer& optimizer) override {
    return m_->configure_lr_schedulers(optimizer);
  }

 private:
  std::unique_ptr<pl::LightningModule> owned_;
  pl::LightningModule* m_;
};

}  // namespace plrt::sdk
