// The sample's model: Linear -> ReLU -> ... -> Linear, softmax cross-entropy averaged over the batch.
// Its parameters are named layers.<i>.weight / layers.<i>.bias for the i-th linear layer, as a
// PyTorch nn.ModuleList of nn.Linear names them, so --save's file loads into that PyTorch model.
#pragma once

#include <memory>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/nn.hpp>
#include <string>
#include <vector>

struct OptimizerConfig {
  std::string name = "sgd";  // sgd | adam | adamw | qadam
  double lr = 0.05;
  double momentum = 0.9;       // sgd
  bool nesterov = false;       // sgd
  double weight_decay = -1;    // < 0: the optimizer's default (0; AdamW's 1e-2)
  int64_t warmup_steps = 100;  // qadam: steps run as Adam first
};

class MlpClassifier : public pl::LightningModule {
 public:
  // whole_batch_loss: under dp/ddp2 take the loss over the whole batch in training_step_end
  // (Lightning's two-phase dp step) rather than per replica.
  MlpClassifier(int64_t in_features, const std::vector<int64_t>& hidden, int64_t classes, OptimizerConfig optim,
                bool whole_batch_loss = false);

  pl::Tensor forward(const pl::Tensor& x);
  void backward(const pl::Tensor& dlogits);

  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx) override;
  void validation_step(const pl::Batch& batch, int64_t batch_idx) override;
  void test_step(const pl::Batch& batch, int64_t batch_idx) override;
  std::unique_ptr<pl::Optimizer> configure_optimizers() override;
  // dp/ddp2: a model of the same shape per extra device.
  std::unique_ptr<pl::LightningModule> replicate() const override;
  bool split_step() const override { return whole_batch_loss_; }
  pl::Tensor forward_step(const pl::Batch& batch, int64_t batch_idx) override;
  pl::Scalar training_step_end(std::vector<pl::ReplicaOutput>& outputs) override;
  void backward_step(const pl::Tensor& output_grad) override;

 private:
  void evaluate(const pl::Batch& batch, const std::string& prefix);
  pl::Module layers_;  // the ModuleList: children "0", "1", ...
  std::vector<std::unique_ptr<pl::nn::Linear>> linear_;
  std::vector<pl::nn::ReLU> relu_;
  pl::nn::CrossEntropyLoss loss_fn_;  // its gradient buffer is reused step after step
  OptimizerConfig optim_;
  int64_t in_features_, classes_;
  std::vector<int64_t> hidden_;
  bool whole_batch_loss_;
};
