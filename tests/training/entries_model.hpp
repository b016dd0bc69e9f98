// A small classifier for the tests of the trainer's ABI 1.4 strategy entries (test_strategy_entries
// in process, entries_worker under plrun): two Linear layers, a buffer, optionally a frozen bias,
// optionally an inf gradient on one rank at one batch (16-mixed skips), logging with sync_dist and
// LightningModule::all_gather.  Everything is deterministic from the seed.
#pragma once

#include <cmath>
#include <limits>
#include <memory>
#include <plrt/sdk/nn.hpp>
#include <plrt/sdk/trainer.hpp>
#include <vector>

namespace entries_test {

struct ModelConfig {
  bool freeze_l1_bias = false;  // l1.bias requires_grad false (a frozen parameter)
  int inf_rank = -1;            // this rank writes an inf into l2.weight's gradient ...
  int64_t inf_batch = -1;       // ... at this batch of every epoch
  bool inf_in_input = false;    // ... into its input instead (ddp: the allreduce then spreads it)
  bool gather = false;          // training_step calls all_gather and logs with sync_dist
};

class Model : public pl::LightningModule {
 public:
  explicit Model(ModelConfig c = {}) : c_(c), l1_(6, 5), l2_(5, 3) {
    register_module("l1", l1_);
    register_module("l2", l2_);
    register_buffer("seen", pl::Tensor::zeros({1}, PL_F32));
    if (c.freeze_l1_bias) l1_.bias()->requires_grad = false;
  }
  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx) override {
    const bool inject = global_rank() == c_.inf_rank && batch_idx == c_.inf_batch;
    if (inject && c_.inf_in_input) batch.at(0).data_ptr<float>()[0] = std::numeric_limits<float>::infinity();
    pl::Tensor h = relu_.forward(l1_.forward(batch.at(0)));
    auto ce = pl::nn::cross_entropy(l2_.forward(h), batch.at(1), true);
    l1_.backward(relu_.backward(l2_.backward(ce.grad)), false);
    if (inject && !c_.inf_in_input) l2_.weight().grad.data_ptr<float>()[0] = std::numeric_limits<float>::infinity();
    if (c_.gather) {
      gathered = all_gather(static_cast<double>(global_rank() + 1));
      pl::LogOptions o;
      o.sync_dist = true;
      o.reduce_fx = pl::Reduce::Sum;
      log("rank_plus_one", global_rank() + 1.0, o);
    }
    return ce.loss;
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;  // state per parameter (and per range)
    return std::make_unique<pl::SGD>(parameters(), o);
  }
  pl::nn::Linear& l1() { return l1_; }
  pl::nn::Linear& l2() { return l2_; }
  std::vector<double> gathered;

 private:
  ModelConfig c_;
  pl::nn::Linear l1_, l2_;
  pl::nn::ReLU relu_;
};

// n rows of 6 features and a label in [0, 3), the same on every rank.
inline std::shared_ptr<pl::TensorDataset> dataset(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < 6; ++k) x.push_back(static_cast<float>(std::sin(0.37 * static_cast<double>(i * 6 + k))));
    y.push_back(i % 3);
  }
  return std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{pl::Tensor::from_vector(x, {n, 6}), pl::Tensor::from_vector(y, {n})});
}

inline pl::DataLoader loader(int64_t n, int64_t batch) {
  pl::DataLoaderOptions o;
  o.batch_size = batch;
  return pl::DataLoader(dataset(n), o);
}

}  // namespace entries_test
