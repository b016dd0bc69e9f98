// The network, data and reference loop of test_torch_lightning.cpp and its plrun worker.
#pragma once

#include <torch/torch.h>

#include <plrt/sdk/data.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/sdk/trainer.hpp>
#include <plrt/torch/data.hpp>
#include <plrt/torch/lightning.hpp>
#include <string>
#include <vector>

namespace torch_lightning {

// 4 features → 16 → 3 classes, with a ReLU; its initial weights come from seed 7 (every Net equal).
struct Net : pl::torch::LightningModule {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  bool detach_loss = false, foreign_optimizer = false, lbfgs = false;  // the error cases
  bool step_lr = false;                                                // libtorch's StepLR(1, 0.5) after each epoch
  bool empty_schedule = false;     // an error case: a SchedulerConfig without its scheduler
  std::string optimizer = "adam";  // or sgd (momentum), adamw (amsgrad), rmsprop (centered, momentum), adagrad
  bool two_groups = false;         // SGD with fc1 at lr 0.1 and fc2 at 0.2, and plrt's StepLR(1, 0.5) over it
  torch::optim::Optimizer* torch_optimizer = nullptr;  // the one configure_optimizers made (for the test)
  torch::Tensor gathered;                              // all_gather of {rank, 10 rank} at each training epoch's end
  void on_train_epoch_end() override {
    const double r = global_rank();
    gathered = all_gather(torch::tensor({r, 10 * r}));
  }
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
    namespace o = torch::optim;
    if (two_groups) {
      std::vector<o::OptimizerParamGroup> groups;
      groups.emplace_back(fc1->parameters(), std::make_unique<o::SGDOptions>(0.1));
      groups.emplace_back(fc2->parameters(), std::make_unique<o::SGDOptions>(0.2));
      auto sgd = std::make_unique<o::SGD>(std::move(groups), o::SGDOptions(0.1));
      torch_optimizer = sgd.get();
      return sgd;
    }
    if (optimizer == "sgd") return std::make_unique<o::SGD>(parameters(), o::SGDOptions(0.1).momentum(0.9));
    if (optimizer == "adamw") return std::make_unique<o::AdamW>(parameters(), o::AdamWOptions(0.01).amsgrad(true));
    if (optimizer == "rmsprop")
      return std::make_unique<o::RMSprop>(parameters(), o::RMSpropOptions(0.01).centered(true).momentum(0.5));
    if (optimizer == "adagrad")
      return std::make_unique<o::Adagrad>(parameters(), o::AdagradOptions(0.1).initial_accumulator_value(0.1));
    return std::make_unique<o::Adam>(parameters(), o::AdamOptions(0.01));
  }
  std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer& o) override {
    std::vector<pl::LRSchedulerConfig> s;
    if (two_groups) {
      s.emplace_back();
      s.back().scheduler = std::make_shared<pl::StepLR>(o, 1, 0.5);
    }
    return s;
  }
  std::vector<pl::torch::SchedulerConfig> configure_torch_lr_schedulers(torch::optim::Optimizer& o) override {
    std::vector<pl::torch::SchedulerConfig> s;
    if (empty_schedule) s.emplace_back();
    if (step_lr) {
      s.emplace_back();
      s.back().scheduler = std::make_unique<torch::optim::StepLR>(o, 1, 0.5);
    }
    return s;
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

// The same rows as a libtorch dataset (read one Example at a time), for pl::torch::data_loader.
struct Rows : torch::data::datasets::Dataset<Rows> {
  torch::Tensor x, y;
  explicit Rows(int64_t n) {
    const auto data = dataset(n);
    x = torch::from_blob(data->fields()[0].data(), {n, 4}).clone();
    y = torch::from_blob(data->fields()[1].data(), {n}, torch::kInt64).clone();
  }
  torch::data::Example<> get(size_t i) override {
    const auto k = static_cast<int64_t>(i);
    return {x[k], y[k]};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(x.size(0)); }
};

// The loader of `n` rows, `batch` a rank: plrt's TensorDataset, or (torch_dataset) Rows through a
// libtorch Lambda transform (the values stay) and, with stack, libtorch's Stack.
inline pl::DataLoader loader(int64_t n, int64_t batch, bool torch_dataset = false, bool stack = false) {
  pl::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = false;
  if (!torch_dataset) return pl::DataLoader(dataset(n), lo);
  using Example = torch::data::Example<>;
  auto mapped = Rows(n).map(torch::data::transforms::Lambda<Example>([](Example e) { return e; }));
  if (stack) return pl::torch::data_loader(std::move(mapped).map(torch::data::transforms::Stack<>()), lo);
  return pl::torch::data_loader(std::move(mapped), lo);
}

// libtorch alone, as a user writes it: batches of `batch` rows in order, backward on loss /
// accumulate, at each window's end (and the epoch's) clip the gradient norm to `clip`, Adam,
// zero_grad; with step_lr, libtorch's StepLR(1, 0.5) stepped after each epoch.
inline void plain_loop(Net& net, int64_t rows, int64_t batch, int epochs, int accumulate, double clip,
                       bool step_lr = false) {
  const auto data = dataset(rows);  // the same rows the Trainer's loader reads
  const torch::Tensor x = torch::from_blob(data->fields()[0].data(), {rows, 4}).clone();
  const torch::Tensor y = torch::from_blob(data->fields()[1].data(), {rows}, torch::kInt64).clone();
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::StepLR schedule(opt, 1, 0.5);
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
      if (step_lr && b + 1 == batches) schedule.step();
    }
}

// The parameters by name (fc1.weight, ...), as host pl::Tensors.
inline std::vector<std::pair<std::string, pl::Tensor>> named(Net& net) {
  std::vector<std::pair<std::string, pl::Tensor>> out;
  for (auto& item : net.named_parameters()) {
    const torch::Tensor t = item.value().detach().contiguous();
    std::vector<float> v(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    out.emplace_back(item.key(), pl::Tensor::from_vector(v, pl::Shape(t.sizes().begin(), t.sizes().end())));
  }
  return out;
}

// The parameters as safetensors (the names and layout PyTorch's state_dict has).
inline void save(Net& net, const std::string& path) { pl::safetensors::save(path, named(net)); }

// The PyTorch reference's input (torch_lightning_reference.py --data): a fresh Net's initial
// weights and `rows` rows of dataset() as x and y.
inline void write_inputs(const std::string& path, int64_t rows) {
  Net net;
  auto tensors = named(net);
  const auto data = dataset(rows);
  tensors.emplace_back("x", data->fields()[0]);
  tensors.emplace_back("y", data->fields()[1]);
  pl::safetensors::save(path, tensors);
}

inline void load(Net& net, const std::string& path) {
  const auto file = pl::safetensors::load(path);
  torch::NoGradGuard no_grad;
  for (auto& item : net.named_parameters()) {
    const pl::Tensor& t = file.tensors.at(item.key());
    item.value().copy_(torch::from_blob(t.data(), item.value().sizes()));
  }
}

}  // namespace torch_lightning
