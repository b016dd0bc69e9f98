// Shared by the callback tests: a module whose logged values follow a script (so the tests know
// every value an epoch logs), and one fit in a folder of its own.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/nn.hpp>
#include <plrt/sdk/trainer.hpp>
#include <string>
#include <vector>

namespace callback_test {

namespace fs = std::filesystem;

// A linear layer on 12 samples (3 training batches of 4); the validation loader has one batch of 4,
// and validation_step logs "val_loss" = val_script[current_epoch] (the last entry repeats), so the
// epoch's value is exactly the script's.  training_step logs "train_loss" (prog_bar).
struct Scripted : pl::LightningModule {
  pl::Generator gen{5};
  pl::nn::Linear fc{4, 3, true, &gen};
  std::vector<double> val_script{1.0};
  std::function<std::vector<pl::LRSchedulerConfig>(pl::Optimizer&)> schedules;
  std::vector<std::shared_ptr<pl::Callback>> own_callbacks;
  Scripted() { register_module("fc", fc); }
  pl::Scalar training_step(const pl::Batch& b, int64_t) override {
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1));
    fc.backward(ce.grad, false);
    log("train_loss", ce.loss);
    return ce.loss;
  }
  void validation_step(const pl::Batch&, int64_t) override {
    const size_t e = static_cast<size_t>(current_epoch());
    log("val_loss", val_script.at(std::min(e, val_script.size() - 1)));
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    return std::make_unique<pl::SGD>(parameters(), o);
  }
  std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer& o) override {
    return schedules ? schedules(o) : std::vector<pl::LRSchedulerConfig>{};
  }
  std::vector<std::shared_ptr<pl::Callback>> configure_callbacks() override { return own_callbacks; }
};

inline std::shared_ptr<pl::TensorDataset> dataset(int64_t n) {
  std::vector<float> xs(static_cast<size_t>(n) * 4);
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
  return std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{pl::Tensor::from_vector(xs, {n, 4}), pl::Tensor::from_vector(ys, {n})});
}

struct FitRun {
  static inline int made = 0;
  fs::path dir = fs::temp_directory_path() /
                 ("plrt-cb-" + std::to_string(::getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" + std::to_string(made++));
  pl::TrainerOptions o;
  FitRun() {
    o.accelerator = "cpu";
    o.devices = 1;
    o.strategy = "single_device";
    o.max_epochs = 4;
    o.read_env = false;
    o.default_root_dir = dir.string();
  }
  ~FitRun() { fs::remove_all(dir); }
  static pl::RuntimeOptions runtime() {
    pl::RuntimeOptions ro;
    ro.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
    ro.use_env_dirs = false;
    ro.log_level = "warn";
    return ro;
  }
  // runtime() at level info, every log line appended to `lines`.
  static pl::RuntimeOptions capturing(std::vector<std::string>& lines) {
    pl::RuntimeOptions ro = runtime();
    ro.log_level = "info";
    ro.log_user = &lines;
    ro.log_callback = [](void* user, PL_LogLevel, const char* line) {
      static_cast<std::vector<std::string>*>(user)->push_back(line);
    };
    return ro;
  }
  // fit `m` (with a validation loader unless `with_val` is false); returns the trainer's epoch
  // count afterwards.  `after` sees the trainer before it goes.
  int64_t fit(Scripted& m, bool with_val = true, const std::string& ckpt = "",
              const std::function<void(pl::Trainer&)>& after = {}) {
    pl::Trainer trainer(o, runtime());
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    lo.shuffle = false;
    pl::DataLoader train(dataset(12), lo), val(dataset(4), lo);
    trainer.fit(m, train, with_val ? &val : nullptr, ckpt);
    if (after) after(trainer);
    return trainer.current_epoch();
  }
};

}  // namespace callback_test
