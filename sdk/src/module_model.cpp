// The TrainerModel of a pl::LightningModule (module_model.hpp).
#include "module_model.hpp"

#include <cstring>
#include <plrt/sdk/amp.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/model_summary.hpp>
#include <unordered_map>

#include "sdk_internal.hpp"

namespace pl {

Tensor TrainerModel::forward_step(const Batch&, int64_t, const StepScales&) {
  throw Error(PL_ERR_UNSUPPORTED, "this kind of module has no two-phase steps (forward_step)");
}

void TrainerModel::backward_step(const Tensor&, const StepScales&) {
  throw Error(PL_ERR_UNSUPPORTED, "this kind of module has no two-phase steps (backward_step)");
}

std::unique_ptr<TrainerModel> LightningModule::trainer_model() {
  return std::make_unique<plrt::sdk::ModuleModel>(*this);
}

}  // namespace pl

namespace plrt::sdk {

// An owned replica forgets the trainer first: its destructor would otherwise tell the trainer,
// which is destroying it.
ModuleModel::~ModuleModel() {
  if (owned_) owned_->trainer_ = nullptr, owned_->link_ = nullptr;
}

std::string ModuleModel::type_name() const { return demangled(typeid(*m_)); }

void ModuleModel::set_grad_ready_hook(std::function<void(size_t)> hook) {
  if (!hook) {
    m_->set_grad_ready_hook(nullptr);
    return;
  }
  // the layers report a Parameter; the loop wants its index among parameters()
  std::unordered_map<const Parameter*, size_t> index;
  size_t k = 0;
  for (auto& [name, p] : m_->named_parameters()) index[p] = k++;
  m_->set_grad_ready_hook([index = std::move(index), hook = std::move(hook)](Parameter& p) {
    auto it = index.find(&p);
    if (it != index.end()) hook(it->second);
  });
}

void ModuleModel::fill_unwritten_grads() {
  for (Parameter* p : m_->parameters()) {
    if (!p->requires_grad || !p->grad_is_zero || !p->grad.defined() || p->grad.numel() == 0) continue;
    PL_Tensor g = p->grad.view();
    if (p->grad.accelerator().defined())
      p->grad.accelerator().fill(g, 0.0);
    else
      std::memset(p->grad.data(), 0, p->grad.nbytes());
    p->grad_is_zero = false;
  }
}

std::vector<TrainerModel::Submodule> ModuleModel::submodules(int max_depth) {
  return ModelSummary::submodules(*m_, max_depth);
}

std::unique_ptr<TrainerModel> ModuleModel::replicate(Trainer* trainer) const {
  std::unique_ptr<LightningModule> rep = m_->replicate();
  if (!rep || rep.get() == m_)
    throw Error(PL_ERR_INVALID_ARGUMENT, "replicate() must return a new module of the same architecture");
  rep->trainer_ = trainer;
  rep->link_ = m_->link_;  // the root module's trainer
  return std::make_unique<ModuleModel>(std::move(rep));
}

Scalar ModuleModel::training_step(const Batch& batch, int64_t batch_idx, const StepScales& s) {
  const amp::Autocast autocast(s.compute, s.loss);
  m_->set_grad_scale(s.grad);
  return m_->training_step(batch, batch_idx);
}

Tensor ModuleModel::forward_step(const Batch& batch, int64_t batch_idx, const StepScales& s) {
  const amp::Autocast autocast(s.compute, s.loss);
  m_->set_grad_scale(s.grad);
  return m_->forward_step(batch, batch_idx);
}

void ModuleModel::backward_step(const Tensor& output_grad, const StepScales& s) {
  const amp::Autocast autocast(s.compute, s.loss);
  m_->set_grad_scale(s.grad);
  m_->backward_step(output_grad);
}

Scalar ModuleModel::training_step_end(std::vector<ReplicaOutput>& outputs, const StepScales& s) {
  const amp::Autocast autocast(s.compute, s.loss);  // a two-phase output_grad reads loss_scale()
  return m_->training_step_end(outputs);
}

void ModuleModel::eval_step(ReplicaOutput& out, int64_t batch_idx, bool test, PL_DType compute) {
  const amp::Autocast autocast(compute);
  if (m_->split_eval_step())
    out.output = m_->forward_step(out.batch, batch_idx);
  else if (test)
    m_->test_step(out.batch, batch_idx);
  else
    m_->validation_step(out.batch, batch_idx);
}

void ModuleModel::eval_step_end(std::vector<ReplicaOutput>& outputs, bool test, PL_DType compute) {
  const amp::Autocast autocast(compute);
  test ? m_->test_step_end(outputs) : m_->validation_step_end(outputs);
}

Tensor ModuleModel::predict_step(const Batch& batch, int64_t batch_idx, PL_DType compute) {
  const amp::Autocast autocast(compute);
  return m_->predict_step(batch, batch_idx);
}

}  // namespace plrt::sdk
