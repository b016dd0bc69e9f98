#include "mlp_module.hpp"

#include <plrt/sdk/optim.hpp>

MlpClassifier::MlpClassifier(int64_t in_features, const std::vector<int64_t>& hidden, int64_t classes,
                             OptimizerConfig optim, bool whole_batch_loss)
    : optim_(std::move(optim)),
      in_features_(in_features),
      classes_(classes),
      hidden_(hidden),
      whole_batch_loss_(whole_batch_loss) {
  std::vector<int64_t> sizes{in_features};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(classes);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    linear_.push_back(std::make_unique<pl::nn::Linear>(sizes[i], sizes[i + 1]));
    layers_.register_module(std::to_string(i), *linear_.back());
  }
  relu_.resize(linear_.size() - 1);
  register_module("layers", layers_);
  // Lightning's save_hyperparameters() in __init__: the constructor's arguments, in hparams.yaml.
  std::string widths;
  for (int64_t h : hidden) widths += (widths.empty() ? "" : ",") + std::to_string(h);
  save_hyperparameters({{"in_features", static_cast<long long>(in_features)},
                        {"hidden", widths.empty() ? "none" : widths},
                        {"classes", static_cast<long long>(classes)},
                        {"optimizer", optim_.name},
                        {"lr", optim_.lr},
                        {"momentum", optim_.momentum},
                        {"nesterov", optim_.nesterov},
                        {"weight_decay", optim_.weight_decay},
                        {"warmup_steps", static_cast<long long>(optim_.warmup_steps)},
                        {"whole_batch_loss", whole_batch_loss}});
}

pl::Tensor MlpClassifier::forward(const pl::Tensor& x) {
  pl::Tensor h = x;
  for (size_t i = 0; i < linear_.size(); ++i) {
    h = linear_[i]->forward(h);
    if (i < relu_.size()) h = relu_[i].forward(h);
  }
  return h;
}

// Last layer first: each Linear's backward writes its gradients and reports them ready, so ddp
// starts reducing the last layers while the first ones are still being differentiated.
void MlpClassifier::backward(const pl::Tensor& dlogits) {
  pl::Tensor d = dlogits;
  for (size_t i = linear_.size(); i-- > 0;) {
    d = linear_[i]->backward(d, /*need_input_grad=*/i > 0);
    if (i > 0) d = relu_[i - 1].backward(d);
  }
}

pl::Scalar MlpClassifier::training_step(const pl::Batch& batch, int64_t) {
  pl::Tensor logits = forward(batch.at(0));
  auto ce = loss_fn_(logits, batch.at(1), /*with_grad=*/true);
  backward(ce.grad);
  pl::LogOptions bar;
  bar.prog_bar = true;
  bar.on_epoch = true;
  log("train_loss", ce.loss, bar);
  pl::LogOptions epoch_only;
  epoch_only.on_step = false;
  epoch_only.on_epoch = true;
  epoch_only.sync_dist = true;
  log("train_acc", ce.accuracy(), epoch_only);
  return ce.loss;  // deferred (pl::Scalar): the step does not wait for the device to read it
}

void MlpClassifier::evaluate(const pl::Batch& batch, const std::string& prefix) {
  pl::Tensor logits = forward(batch.at(0));
  auto ce = loss_fn_(logits, batch.at(1), /*with_grad=*/false);
  pl::LogOptions o;
  o.sync_dist = true;  // the true mean over every rank's samples (weighted by batch size)
  log(prefix + "_loss", ce.loss, o);
  pl::LogOptions shown = o;
  shown.prog_bar = true;  // on the progress bar, as the loss is
  log(prefix + "_acc", ce.accuracy(), shown);
}

void MlpClassifier::validation_step(const pl::Batch& batch, int64_t) { evaluate(batch, "val"); }
void MlpClassifier::test_step(const pl::Batch& batch, int64_t) { evaluate(batch, "test"); }

std::unique_ptr<pl::Optimizer> MlpClassifier::configure_optimizers() {
  if (optim_.name == "qadam") {  // bagua's qadam needs it (docs/bagua.md §6)
    pl::QAdamOptions o;
    o.lr = optim_.lr;
    o.warmup_steps = optim_.warmup_steps;
    if (optim_.weight_decay >= 0) o.weight_decay = optim_.weight_decay;
    return std::make_unique<pl::QAdam>(parameters(), o);
  }
  if (optim_.name == "adam" || optim_.name == "adamw") {
    pl::AdamOptions o = optim_.name == "adamw" ? pl::AdamW::defaults() : pl::AdamOptions{};
    o.lr = optim_.lr;
    if (optim_.weight_decay >= 0) o.weight_decay = optim_.weight_decay;
    if (optim_.name == "adamw") return std::make_unique<pl::AdamW>(parameters(), o);
    return std::make_unique<pl::Adam>(parameters(), o);
  }
  pl::SgdOptions o;
  o.lr = optim_.lr;
  o.momentum = optim_.momentum;
  o.nesterov = optim_.nesterov;
  if (optim_.weight_decay >= 0) o.weight_decay = optim_.weight_decay;
  return std::make_unique<pl::SGD>(parameters(), o);
}

std::unique_ptr<pl::LightningModule> MlpClassifier::replicate() const {
  return std::make_unique<MlpClassifier>(in_features_, hidden_, classes_, optim_, whole_batch_loss_);
}

// The two-phase step: each replica returns its logits; the root takes the mean loss over the
// whole batch and hands each replica the gradient of that loss with respect to its logits.
pl::Tensor MlpClassifier::forward_step(const pl::Batch& batch, int64_t) { return forward(batch.at(0)); }

pl::Scalar MlpClassifier::training_step_end(std::vector<pl::ReplicaOutput>& outputs) {
  if (!whole_batch_loss_) return LightningModule::training_step_end(outputs);
  int64_t rows = 0;
  pl::Scalar correct = 0.0;
  for (const auto& o : outputs) rows += o.batch_size;
  pl::Scalar loss = 0.0;
  for (auto& o : outputs) {
    auto ce = pl::nn::cross_entropy(o.output, o.batch.at(1), /*with_grad=*/true);
    const double share = static_cast<double>(o.batch_size) / static_cast<double>(rows);
    PL_Tensor g = ce.grad.view();
    ce.grad.accelerator().scale(g, share);  // d(mean over the whole batch) = share * d(mean over the slice)
    o.output_grad = ce.grad;
    loss = loss + share * ce.loss;
    correct = correct + ce.correct;
  }
  pl::LogOptions bar;
  bar.prog_bar = true;
  bar.on_epoch = true;
  bar.batch_size = rows;
  log("train_loss", loss, bar);
  pl::LogOptions epoch_only;
  epoch_only.on_step = false;
  epoch_only.on_epoch = true;
  epoch_only.sync_dist = true;
  epoch_only.batch_size = rows;
  log("train_acc", correct / static_cast<double>(rows), epoch_only);
  return loss;
}

void MlpClassifier::backward_step(const pl::Tensor& output_grad) { backward(output_grad); }
