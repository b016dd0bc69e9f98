// plrt-torch-cnn's model: a libtorch CNN for 8x8 grey images (scikit-learn's digits) in a
// pl::torch::LightningModule: two 3x3 convolutions with batch norm, max pooling, dropout, two linear
// layers; cross-entropy, accuracy logged synced across the ranks, Adam.
#pragma once

#include <plrt/torch/lightning.hpp>

class DigitsCnn : public pl::torch::LightningModule {
 public:
  DigitsCnn(int64_t classes, double lr) : lr_(lr) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(16));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(32));
    drop = register_module("drop", torch::nn::Dropout(0.25));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 4 * 4, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, classes));
    save_hyperparameters({{"classes", classes}, {"lr", lr}});
  }

  // x: [N, 64] pixels in 0..1, read as [N, 1, 8, 8] images
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::relu(bn1(conv1(x.view({-1, 1, 8, 8}))));
    h = torch::max_pool2d(torch::relu(bn2(conv2(h))), 2);
    h = drop(h.flatten(1));
    return fc2(drop(torch::relu(fc1(h))));
  }

  torch::Tensor training_step(const pl::torch::Batch& b, int64_t) override {
    torch::Tensor loss = torch::nn::functional::cross_entropy(forward(b.at(0)), b.at(1));
    pl::LogOptions bar;
    bar.prog_bar = true;
    log("train_loss", loss, bar);
    return loss;
  }

  void validation_step(const pl::torch::Batch& b, int64_t) override {
    const torch::Tensor logits = forward(b.at(0));
    pl::LogOptions synced;
    synced.sync_dist = true;
    log("val_loss", torch::nn::functional::cross_entropy(logits, b.at(1)), synced);
    synced.prog_bar = true;
    log("val_acc", logits.argmax(1).eq(b.at(1)).to(torch::kFloat64).mean(), synced);
  }

  torch::Tensor predict_step(const pl::torch::Batch& b, int64_t) override { return forward(b.at(0)).argmax(1); }

  std::unique_ptr<torch::optim::Optimizer> configure_optimizers() override {
    return std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(lr_));
  }

 private:
  double lr_;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
