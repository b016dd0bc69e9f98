// The Trainer's learning-rate schedules (LightningModule::configure_lr_schedulers): the lr each
// training step sees, for an epoch schedule and a step schedule, equals PyTorch's scheduler values
// (tests/sdk/lr_scheduler_reference.py); a run resumed from its checkpoint goes on with the same
// values; a plateau schedule follows its logged monitor; bad configurations are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/nn.hpp>
#include <plrt/sdk/trainer.hpp>

#include "lr_reference.hpp"

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using MakeSchedules = std::function<std::vector<pl::LRSchedulerConfig>(pl::Optimizer&)>;

// A linear layer on 12 samples (3 batches of 4 per epoch) that records the lr of every step.
struct Recorder : pl::LightningModule {
  pl::Generator gen{5};
  pl::nn::Linear fc{4, 3, true, &gen};
  MakeSchedules make;
  pl::Optimizer* opt = nullptr;
  std::vector<double> lrs;
  Recorder() { register_module("fc", fc); }
  pl::Scalar training_step(const pl::Batch& b, int64_t) override {
    lrs.push_back(opt->lr());
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1));
    fc.backward(ce.grad, false);
    log("constant", 1.0);
    return ce.loss;
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    auto sgd = std::make_unique<pl::SGD>(parameters(), o);
    opt = sgd.get();
    return sgd;
  }
  std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer& o) override {
    return make ? make(o) : std::vector<pl::LRSchedulerConfig>{};
  }
};

struct FitRun {
  static inline int made = 0;  // two runs of one test get two folders
  fs::path dir = fs::temp_directory_path() /
                 ("plrt-lrs-" + std::to_string(::getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" + std::to_string(made++));
  ~FitRun() { fs::remove_all(dir); }
  // fit for max_epochs (from "last" when resume), returning the lrs its steps saw.
  std::vector<double> fit(const MakeSchedules& make, int64_t max_epochs, bool resume = false) {
    pl::TrainerOptions o;
    o.accelerator = "cpu";
    o.devices = 1;
    o.strategy = "single_device";
    o.max_epochs = max_epochs;
    o.enable_progress_bar = false;
    o.read_env = false;
    o.default_root_dir = dir.string();
    pl::RuntimeOptions ro;
    ro.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
    ro.use_env_dirs = false;
    ro.log_level = "warn";
    pl::Trainer trainer(o, ro);
    Recorder m;
    m.make = make;
    std::vector<float> xs(12 * 4);
    std::vector<int64_t> ys(12);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i));
    for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
    auto ds = std::make_shared<pl::TensorDataset>(
        std::vector<pl::Tensor>{pl::Tensor::from_vector(xs, {12, 4}), pl::Tensor::from_vector(ys, {12})});
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    lo.shuffle = false;
    pl::DataLoader loader(ds, lo);
    trainer.fit(m, loader, nullptr, resume ? "last" : "");
    return m.lrs;
  }
};

using plrt_lr_test::reference;

double ref_lr(const std::string& key, size_t i) { return plrt_lr_test::ref_value(reference()[key]["lr"].at(i)); }

pl::LRSchedulerConfig cosine(pl::Optimizer& o) {
  pl::LRSchedulerConfig c;
  c.scheduler = std::make_shared<pl::CosineAnnealingLR>(o, 7, 0.001);
  return c;
}

TEST(TrainerLRSchedules, AnEpochScheduleGivesEachEpochPyTorchsValue) {
  if (reference().contains("error")) GTEST_SKIP() << "no PyTorch: " << reference()["error"].get<std::string>();
  FitRun run;
  const auto lrs = run.fit([](pl::Optimizer& o) { return std::vector<pl::LRSchedulerConfig>{cosine(o)}; }, 4);
  ASSERT_EQ(lrs.size(), 12u);
  for (size_t k = 0; k < lrs.size(); ++k) EXPECT_EQ(lrs[k], ref_lr("cosine", k / 3)) << "step " << k;
}

TEST(TrainerLRSchedules, AStepScheduleMovesAfterEveryOptimizerStep) {
  if (reference().contains("error")) GTEST_SKIP() << "no PyTorch: " << reference()["error"].get<std::string>();
  FitRun run;
  const auto lrs = run.fit(
      [](pl::Optimizer& o) {
        pl::OneCycleOptions oc;
        oc.max_lr = 0.5;
        oc.total_steps = 12;
        pl::LRSchedulerConfig c;
        c.scheduler = std::make_shared<pl::OneCycleLR>(o, oc);
        c.interval = "step";
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      4);
  ASSERT_EQ(lrs.size(), 12u);
  for (size_t k = 0; k < lrs.size(); ++k) EXPECT_EQ(lrs[k], ref_lr("onecycle12", k)) << "step " << k;
}

// frequency 2 with interval "step": the epoch's batches 2, 4, ... (Lightning's batch_idx + 1).
TEST(TrainerLRSchedules, FrequencyCountsTheEpochsBatches) {
  FitRun run;
  const auto lrs = run.fit(
      [](pl::Optimizer& o) {
        pl::LRSchedulerConfig c;
        c.scheduler = std::make_shared<pl::ExponentialLR>(o, 0.5);
        c.interval = "step";
        c.frequency = 2;
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      2);
  // epoch 0: batches 1, 2 (step after 2), 3; epoch 1: batches 1, 2 (step after 2), 3
  EXPECT_EQ(lrs, (std::vector<double>{0.1, 0.1, 0.05, 0.05, 0.05, 0.025}));
}

TEST(TrainerLRSchedules, AResumedRunGoesOnWithTheSameValues) {
  FitRun whole, split;
  auto make = [](pl::Optimizer& o) { return std::vector<pl::LRSchedulerConfig>{cosine(o)}; };
  const auto all = whole.fit(make, 4);
  const auto first = split.fit(make, 2);
  const auto rest = split.fit(make, 4, true);
  ASSERT_EQ(first.size() + rest.size(), all.size());
  for (size_t k = 0; k < rest.size(); ++k) EXPECT_EQ(rest[k], all[first.size() + k]) << "resumed step " << k;
  // Another schedule than the checkpoint's is refused by name.
  try {
    split.fit(
        [](pl::Optimizer& o) {
          pl::LRSchedulerConfig c;
          c.scheduler = std::make_shared<pl::StepLR>(o, 2);
          return std::vector<pl::LRSchedulerConfig>{c};
        },
        5, true);
    ADD_FAILURE() << "a different schedule was accepted on resume";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("is CosineAnnealingLR, configure_lr_schedulers made StepLR"));
  }
}

// ReduceLROnPlateau on a logged value that never improves: patience 0 cuts the lr every epoch
// after the first (the first value is the best so far).
TEST(TrainerLRSchedules, APlateauScheduleFollowsItsMonitor) {
  FitRun run;
  const auto lrs = run.fit(
      [](pl::Optimizer& o) {
        pl::ReduceLROnPlateauOptions p;
        p.patience = 0;
        pl::LRSchedulerConfig c;
        c.plateau = std::make_shared<pl::ReduceLROnPlateau>(o, p);
        c.monitor = "constant";
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      4);
  ASSERT_EQ(lrs.size(), 12u);
  const double expected[4] = {0.1, 0.1, 0.1 * 0.1, 0.1 * 0.1 * 0.1};
  for (size_t k = 0; k < lrs.size(); ++k) EXPECT_DOUBLE_EQ(lrs[k], expected[k / 3]) << "step " << k;
}

void expect_refused(const MakeSchedules& make, const std::string& says) {
  FitRun run;
  try {
    run.fit(make, 1);
    ADD_FAILURE() << "accepted; expected: " << says;
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(says));
  }
}

TEST(TrainerLRSchedules, BadConfigurationsAreNamed) {
  expect_refused(
      [](pl::Optimizer& o) {
        auto c = cosine(o);
        c.interval = "batch";
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      "interval 'batch' is not valid; valid: epoch, step");
  expect_refused(
      [](pl::Optimizer& o) {
        auto c = cosine(o);
        c.frequency = 0;
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      "frequency 0 is not valid");
  expect_refused([](pl::Optimizer&) { return std::vector<pl::LRSchedulerConfig>(1); },
                 "must set exactly one of scheduler and plateau");
  expect_refused(
      [](pl::Optimizer& o) {
        pl::LRSchedulerConfig c;
        c.plateau = std::make_shared<pl::ReduceLROnPlateau>(o);
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      "needs a monitor");
  expect_refused(
      [](pl::Optimizer& o) {
        pl::LRSchedulerConfig c;
        c.plateau = std::make_shared<pl::ReduceLROnPlateau>(o);
        c.monitor = "val_loss";
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      "ReduceLROnPlateau conditioned on 'val_loss', which was not logged; logged: constant");
  static pl::Parameter stray;
  expect_refused(
      [](pl::Optimizer&) {
        stray.value = pl::Tensor::zeros({1}, PL_F64);
        static pl::SGD other({&stray}, pl::SgdOptions{});
        pl::LRSchedulerConfig c;
        c.scheduler = std::make_shared<pl::StepLR>(other, 1);
        return std::vector<pl::LRSchedulerConfig>{c};
      },
      "drives another optimizer than configure_optimizers' SGD");
}

}  // namespace
