// Lightning's loop limits (issue 31): limit_{train,val,test}_batches, fast_dev_run, min_epochs /
// min_steps.  Every count below is worked out from the loaders: 12 training samples in batches of
// 4 (3 batches an epoch), 12 validation samples (3 batches).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <plrt/sdk/early_stopping.hpp>
#include <plrt/sdk/model_checkpoint.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

namespace fs = std::filesystem;
using callback_test::FitRun;
using callback_test::Scripted;

struct Counting : Scripted {
  int train_calls = 0, val_calls = 0;
  pl::Scalar training_step(const pl::Batch& b, int64_t i) override {
    ++train_calls;
    return Scripted::training_step(b, i);
  }
  void validation_step(const pl::Batch& b, int64_t i) override {
    ++val_calls;
    Scripted::validation_step(b, i);
  }
};

struct Result {
  int train_calls = 0, val_calls = 0;
  int64_t steps = 0, epochs = 0;
  std::map<std::string, double> metrics;
};

Result fit(FitRun& run, bool with_val = true, const std::function<void(Counting&)>& setup = {}) {
  pl::Trainer trainer(run.o, FitRun::runtime());
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader train(callback_test::dataset(12), lo), val(callback_test::dataset(12), lo);
  Counting m;
  if (setup) setup(m);
  trainer.fit(m, train, with_val ? &val : nullptr);
  return {m.train_calls, m.val_calls, trainer.global_step(), trainer.current_epoch(), trainer.callback_metrics()};
}

FitRun quiet_run(int64_t epochs) {
  FitRun run;
  run.o.max_epochs = epochs;
  run.o.enable_progress_bar = false;
  return run;
}

TEST(LoopLimits, BatchLimitParsesCountsAndFractionsAndNamesBadText) {
  EXPECT_FALSE(pl::BatchLimit::parse("x", "10").is_fraction());
  EXPECT_EQ(pl::BatchLimit::parse("x", "10").count(), 10);
  EXPECT_TRUE(pl::BatchLimit::parse("x", "1.0").all());
  EXPECT_FALSE(pl::BatchLimit::parse("x", "1").all()) << "1 is one batch, 1.0 every batch (Lightning's rule)";
  EXPECT_DOUBLE_EQ(pl::BatchLimit::parse("x", "0.25").fraction(), 0.25);
  EXPECT_DOUBLE_EQ(pl::BatchLimit::parse("x", "1e-1").fraction(), 0.1);
  EXPECT_EQ(pl::BatchLimit(0.25).text(), "0.25");
  EXPECT_EQ(pl::BatchLimit(1.0).text(), "1.0");
  for (const char* bad : {"", "-1", "1.5", "abc", "0.5x", "nan", "inf", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    const std::string msg = sdk_test::error_of([&] { pl::BatchLimit::parse("--limit-train-batches", bad); });
    EXPECT_NE(msg.find(std::string("--limit-train-batches='") + bad + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a count of batches"), std::string::npos) << msg;
  }
}

TEST(LoopLimits, LimitTrainBatchesTakesACountOrAFractionOfEachEpoch) {
  struct Case {
    pl::BatchLimit limit;
    int per_epoch;
  } cases[] = {{2, 2}, {10, 3}, {0.34, 1}, {0.99, 2}, {1.0, 3}, {0, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.limit.text());
    FitRun run = quiet_run(4);
    run.o.limit_train_batches = c.limit;
    const Result r = fit(run, /*with_val=*/false);
    EXPECT_EQ(r.train_calls, 4 * c.per_epoch);
    EXPECT_EQ(r.steps, 4 * c.per_epoch) << "the last batch of a limited epoch ends its accumulation window";
    EXPECT_EQ(r.epochs, 4);
  }
}

TEST(LoopLimits, LimitValBatchesCutsEachValidationAndZeroSkipsIt) {
  struct Case {
    pl::BatchLimit limit;
    int per_run;
  } cases[] = {{1, 1}, {0.5, 1}, {0.7, 2}, {1.0, 3}, {0, 0}, {0.0, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.limit.text());
    FitRun run = quiet_run(2);
    run.o.limit_val_batches = c.limit;
    const Result r = fit(run);
    EXPECT_EQ(r.val_calls, 2 * c.per_run + std::min(c.per_run, 2)) << "two epochs' validations and the sanity check";
    EXPECT_EQ(r.metrics.count("val_loss"), c.per_run > 0 ? 1u : 0u);
    EXPECT_EQ(r.train_calls, 6);
  }
}

TEST(LoopLimits, AFractionThatLeavesNoBatchIsAnErrorBeforeAnyStep) {
  FitRun run = quiet_run(2);
  run.o.limit_train_batches = 0.1;  // 0.1 x 3 batches < 1
  int calls = 0;
  const std::string msg = sdk_test::error_of([&] {
    pl::Trainer trainer(run.o, FitRun::runtime());
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    pl::DataLoader train(callback_test::dataset(12), lo);
    Counting m;
    try {
      trainer.fit(m, train);
    } catch (...) {
      calls = m.train_calls;
      throw;
    }
  });
  EXPECT_NE(msg.find("limit_train_batches=0.1 of a loader with 3 batch(es) leaves none"), std::string::npos) << msg;
  EXPECT_EQ(calls, 0);
}

TEST(LoopLimits, BadKnobValuesAreRefusedByTheConstructorNamingThem) {
  struct Case {
    std::function<void(pl::TrainerOptions&)> set;
    const char* named;
  } cases[] = {
      {[](pl::TrainerOptions& o) { o.limit_train_batches = -1; }, "limit_train_batches=-1"},
      {[](pl::TrainerOptions& o) { o.limit_val_batches = 1.5; }, "limit_val_batches=1.5"},
      {[](pl::TrainerOptions& o) { o.limit_test_batches = -0.5; }, "limit_test_batches=-0.5"},
      {[](pl::TrainerOptions& o) { o.fast_dev_run = -1; }, "fast_dev_run=-1"},
      {[](pl::TrainerOptions& o) { o.min_epochs = -1; }, "min_epochs=-1"},
      {[](pl::TrainerOptions& o) { o.min_steps = -2; }, "min_steps=-2"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.named);
    FitRun run = quiet_run(1);
    c.set(run.o);
    const std::string msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
    EXPECT_NE(msg.find(c.named), std::string::npos) << msg;
  }
}

TEST(LoopLimits, FastDevRunRunsNBatchesOfEachLoopAndWritesNothing) {
  FitRun run = quiet_run(5);
  run.o.fast_dev_run = 2;
  run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(pl::ModelCheckpointOptions{}),
                     std::make_shared<pl::EarlyStopping>(pl::EarlyStoppingOptions{"val_loss"})};
  const Result r = fit(run);
  EXPECT_EQ(r.train_calls, 2);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.epochs, 1);
  EXPECT_EQ(r.val_calls, 2);
  EXPECT_TRUE(r.metrics.count("val_loss"));
  EXPECT_FALSE(fs::exists(run.dir / "lightning_logs")) << "fast_dev_run left a log folder";
}

TEST(LoopLimits, MinEpochsHoldsShouldStopBackUntilTheyAreDone) {
  struct StopEachEpoch : pl::Callback {
    void on_train_epoch_end(pl::Trainer& t, pl::LightningBase&) override { t.set_should_stop(true); }
  };
  FitRun run = quiet_run(6);
  run.o.min_epochs = 3;
  run.o.callbacks = {std::make_shared<StopEachEpoch>()};
  const Result held = fit(run, false);
  EXPECT_EQ(held.epochs, 3);
  EXPECT_EQ(held.steps, 9);

  FitRun plain = quiet_run(6);
  plain.o.callbacks = {std::make_shared<StopEachEpoch>()};
  EXPECT_EQ(fit(plain, false).epochs, 1) << "without a minimum the first should_stop ends fit";
}

TEST(LoopLimits, MinStepsHoldsAStopInsideAnEpochUntilThatStep) {
  struct StopEveryBatch : pl::Callback {
    void on_train_batch_end(pl::Trainer& t, pl::LightningBase&, const pl::Scalar&, const pl::Batch&, int64_t) override {
      t.set_should_stop(true);
    }
  };
  FitRun run = quiet_run(6);
  run.o.min_steps = 7;  // epoch 2's first batch
  run.o.callbacks = {std::make_shared<StopEveryBatch>()};
  std::vector<std::string> lines;
  const pl::RuntimeOptions ro = FitRun::capturing(lines);
  pl::Trainer trainer(run.o, ro);
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader train(callback_test::dataset(12), lo);
  Counting m;
  trainer.fit(m, train);
  EXPECT_EQ(trainer.global_step(), 7);
  EXPECT_EQ(m.train_calls, 7);
  int notes = 0;
  for (const auto& l : lines)
    notes += l.find("required min_epochs=0 or min_steps=7 has not been met") != std::string::npos;
  EXPECT_EQ(notes, 1);
}

TEST(LoopLimits, EnvironmentOverridesNameTheVariable) {
  FitRun run = quiet_run(1);
  run.o.read_env = true;
  ::setenv("PL_TRAINER_LIMIT_VAL_BATCHES", "half", 1);
  const std::string msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
  ::unsetenv("PL_TRAINER_LIMIT_VAL_BATCHES");
  EXPECT_NE(msg.find("PL_TRAINER_LIMIT_VAL_BATCHES='half'"), std::string::npos) << msg;

  ::setenv("PL_TRAINER_LIMIT_TRAIN_BATCHES", "1", 1);
  ::setenv("PL_TRAINER_MIN_EPOCHS", "2", 1);
  FitRun env_run = quiet_run(2);
  env_run.o.read_env = true;
  const Result r = fit(env_run, false);
  ::unsetenv("PL_TRAINER_LIMIT_TRAIN_BATCHES");
  ::unsetenv("PL_TRAINER_MIN_EPOCHS");
  EXPECT_EQ(r.train_calls, 2);
}

// A module that logs one value only while the trainer sanity-checks.
struct MarksSanity : Counting {
  pl::Trainer* trainer = nullptr;
  void validation_step(const pl::Batch& b, int64_t i) override {
    Counting::validation_step(b, i);
    if (trainer && trainer->sanity_checking()) log("seen_in_sanity", 1.0);
  }
};

TEST(LoopLimits, TheSanityCheckRunsItsBatchesFirstAndKeepsNothingItLogged) {
  struct Case {
    int64_t steps;
    int check_every;
    int sanity_calls;
  } cases[] = {{2, 1, 2}, {-1, 1, 3}, {0, 1, 0}, {1, 1, 1}, {5, 1, 3}, {2, 2, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE("num_sanity_val_steps=" + std::to_string(c.steps) +
                 " check_val_every_n_epoch=" + std::to_string(c.check_every));
    FitRun run = quiet_run(2);
    run.o.num_sanity_val_steps = c.steps;
    run.o.check_val_every_n_epoch = c.check_every;
    pl::Trainer trainer(run.o, FitRun::runtime());
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    lo.shuffle = false;
    pl::DataLoader train(callback_test::dataset(12), lo), val(callback_test::dataset(12), lo);
    MarksSanity m;
    m.trainer = &trainer;
    trainer.fit(m, train, &val);
    EXPECT_EQ(m.val_calls, c.sanity_calls + 3 * (2 / c.check_every));
    EXPECT_FALSE(trainer.sanity_checking());
    EXPECT_EQ(trainer.callback_metrics().count("seen_in_sanity"), 0u) << "the sanity check's values were kept";
    for (const auto& e : fs::recursive_directory_iterator(run.dir))
      if (e.path().filename() == "metrics.csv") {
        std::ifstream in(e.path());
        std::stringstream text;
        text << in.rdbuf();
        EXPECT_EQ(text.str().find("seen_in_sanity"), std::string::npos) << text.str();
      }
  }
}

TEST(LoopLimits, NumSanityValStepsBelowMinusOneIsRefused) {
  FitRun run = quiet_run(1);
  run.o.num_sanity_val_steps = -2;
  const std::string msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
  EXPECT_NE(msg.find("num_sanity_val_steps=-2 is not valid"), std::string::npos) << msg;
}

}  // namespace
