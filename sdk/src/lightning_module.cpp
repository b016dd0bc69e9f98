// LightningBase's trainer-facing calls (log, all_gather, rank queries: through its ModuleLink and
// the Trainer's public API) and LightningModule's default hooks.
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/trainer.hpp>

#include "module_link.hpp"

namespace pl {

void LightningBase::log(const std::string& name, const Scalar& value, const LogOptions& options) {
  if (link_ == nullptr)
    throw Error(
        PL_ERR_INVALID_ARGUMENT,
        "log('" + name + "') needs a trainer: call it from a step or hook while Trainer::fit/validate/test runs");
  link_->log_value(name, value, options);
}

LightningBase::~LightningBase() {
  if (link_ != nullptr) link_->forget_module(this);
}

std::unique_ptr<LightningModule> LightningModule::replicate() const {
  throw Error(PL_ERR_UNSUPPORTED,
              "this strategy runs one copy of the module per device (dp, ddp2) and needs LightningModule::replicate(): "
              "override it to return a new module of the same architecture, e.g. "
              "`return std::make_unique<MyModel>(config_);` (its values are overwritten before each step)");
}

Scalar LightningModule::training_step_end(std::vector<ReplicaOutput>& outputs) {
  if (split_step())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "split_step() is true, so training_step_end must be overridden: it computes the "
                "loss from every replica's output and sets each output_grad");
  Scalar sum = 0.0;
  for (const auto& o : outputs) sum = sum + o.loss;
  return outputs.empty() ? Scalar(0.0) : sum / static_cast<double>(outputs.size());
}

Tensor LightningModule::forward_step(const Batch&, int64_t) {
  throw Error(PL_ERR_INVALID_ARGUMENT,
              "split_step() or split_eval_step() is true but forward_step is not overridden; it returns the "
              "replica's output (e.g. the logits) without running backward");
}

Tensor LightningModule::predict_step(const Batch&, int64_t) {
  throw Error(PL_ERR_INVALID_ARGUMENT,
              "Trainer::predict needs predict_step: override it to return the batch's prediction (e.g. the "
              "logits)");
}

void LightningModule::backward_step(const Tensor&) {
  throw Error(PL_ERR_INVALID_ARGUMENT,
              "split_step() is true but backward_step is not overridden; it runs the "
              "replica's backward from d(loss)/d(output)");
}

std::vector<Tensor> LightningBase::all_gather(const Tensor& x) {
  if (link_ == nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT, "all_gather needs a trainer: call it while Trainer::fit/validate/test runs");
  plrt::sdk::Collectives c = link_->collectives();
  if (c.world_size() == 1) return {x.clone()};
  std::vector<Tensor> out;
  std::vector<PL_Tensor> views;
  for (int r = 0; r < c.world_size(); ++r) {
    out.push_back(x.accelerator().defined() ? Tensor::empty(x.accelerator(), x.device(), x.shape(), x.dtype())
                                            : Tensor::empty(x.shape(), x.dtype()));
    views.push_back(out.back().view());
  }
  PL_Tensor in = x.view();
  c.allgather(in, views);
  return out;
}

std::vector<double> LightningBase::all_gather(double value) {
  auto parts = all_gather(Tensor::from_vector<double>({value}, {1}));
  std::vector<double> out;
  for (const auto& p : parts) out.push_back(p.to_vector<double>()[0]);
  return out;
}

bool LightningBase::is_global_zero() const { return global_rank() == 0; }
int LightningBase::global_rank() const { return trainer_ ? trainer_->global_rank() : 0; }
int LightningBase::world_size() const { return trainer_ ? trainer_->world_size() : 1; }
int64_t LightningBase::current_epoch() const { return trainer_ ? trainer_->current_epoch() : 0; }
int64_t LightningBase::global_step() const { return trainer_ ? trainer_->global_step() : 0; }

}  // namespace pl
