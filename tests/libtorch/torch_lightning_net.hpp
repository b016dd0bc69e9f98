// The network, data and reference loop of test_torch_lightning.cpp and its plrun worker.
#pragma once

#include <torch/torch.h>

#include <plrt/sdk/data.hpp>
#include <plrt/sdk/trainer.hpp>
#include <plrt/torch/lightning.hpp>
#include <string>
#include <vector>

namespace torch_lightning {

// 4 features → 16 → 3 classes, with a ReLU; its initial weights come from seed 7 (every Net equal).
struct Net : pl::torch::LightningModule {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  bool detach_loss = false, foreign_optimizer = false, lbfgs = false;  // the error cases
  Net() {
    torch::manual_seed(7);
    fc1 = register_module("fc1", torch::nn::Linear(4, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::Tensor training_step(const pl::torch::Batch& b, int64_t) override {
    torch::Tensor loss = torch::nn::functional::cross_entropy(forward(b.at(0)), b.at(1));
    log("train_loss", loss);
    return detach_loss ? loss.detach() : loss;
  }
  void validation_step(const pl::torch::Batch& b, int64_t) override {
    log("val_loss", torch::nn::functional::cross_entropy(forward(b.at(0)), b.at(1)));
  }
  std::unique_ptr<torch::optim::Optimizer> configure_optimizers() override {
    if (foreign_optimizer)
      return std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{torch::zeros({3}, torch::requires_grad())},
                                                 torch::optim::SGDOptions(0.1));
    if (lbfgs) return std::make_unique<torch::optim::LBFGS>(parameters(), torch::optim::LBFGSOptions(0.1));
    return std::make_unique<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
  }
  void copy_from(Net& other) {
    torch::NoGradGuard no_grad;
    auto mine = named_parameters();
    for (auto& item : other.named_parameters()) mine[item.key()].copy_(item.value());
  }
};

// n rows: features sin(i), labels i % 3.
inline std::shared_ptr<pl::TensorDataset> dataset(int64_t n) {
  std::vector<float> xs(static_cast<size_t>(n) * 4);
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
  return std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{pl::Tensor::from_vector(xs, {n, 4}), pl::Tensor::from_vector(ys, {n})});
}

// libtorch alone, as a user writes it: batches of `batch` rows in order, backward on loss /
// accumulate, at each window's end (and the epoch's) clip the gradient norm to `clip`, Adam, zero_grad.
inline void plain_loop(Net& net, int64_t rows, int64_t batch, int epochs, int accumulate, double clip) {
  const auto data = dataset(rows);  // the same rows the Trainer's loader reads
  const torch::Tensor x = torch::from_blob(data->fields()[0].data(), {rows, 4}).clone();
  const torch::Tensor y = torch::from_blob(data->fields()[1].data(), {rows}, torch::kInt64).clone();
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(0.01));
  const int64_t batches = (rows + batch - 1) / batch;
  for (int e = 0; e < epochs; ++e)
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t n = std::min(batch, rows - b * batch);
      torch::Tensor loss =
          torch::nn::functional::cross_entropy(net.forward(x.narrow(0, b * batch, n)), y.narrow(0, b * batch, n));
      (loss / accumulate).backward();
      if ((b + 1) % accumulate == 0 || b + 1 == batches) {
        torch::nn::utils::clip_grad_norm_(net.parameters(), clip);
        opt.step();
        opt.zero_grad();
      }
    }
}

inline void save(Net& net, const std::string& path) {
  std::vector<torch::Tensor> values;
  for (auto& p : net.parameters()) values.push_back(p.detach().clone());
  torch::save(values, path);
}

inline void load(Net& net, const std::string& path) {
  std::vector<torch::Tensor> values;
  torch::load(values, path);
  torch::NoGradGuard no_grad;
  auto params = net.parameters();
  for (size_t i = 0; i < params.size() && i < values.size(); ++i) params[i].copy_(values[i]);
}

}  // namespace torch_lightning
