// The callback interface: Lightning's hook order over a fit with validation, validate/test hooks,
// configure_callbacks replacing the trainer's of the same type, should_stop, callback state in
// checkpoints, and LearningRateMonitor's rows in metrics.csv.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <plrt/sdk/early_stopping.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lr_monitor.hpp>
#include <plrt/sdk/model_checkpoint.hpp>
#include <plrt/sdk/model_summary.hpp>
#include <sstream>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace callback_test;

struct Recorder : pl::Callback {
  std::vector<std::string> calls;
  std::string tag;
  explicit Recorder(std::string t = "") : tag(std::move(t)) {}
  void add(const std::string& s) { calls.push_back(s); }
  void setup(pl::Trainer&, pl::LightningBase&, const std::string& stage) override { add("setup:" + stage); }
  void teardown(pl::Trainer&, pl::LightningBase&, const std::string& stage) override { add("teardown:" + stage); }
  void on_fit_start(pl::Trainer&, pl::LightningBase&) override { add("fit_start"); }
  void on_fit_end(pl::Trainer&, pl::LightningBase&) override { add("fit_end"); }
  void on_sanity_check_start(pl::Trainer& t, pl::LightningBase&) override {
    add(std::string("sanity_start") + (t.sanity_checking() ? "" : ":not-flagged"));
  }
  void on_sanity_check_end(pl::Trainer&, pl::LightningBase&) override { add("sanity_end"); }
  void on_train_start(pl::Trainer& t, pl::LightningBase&) override {
    add(std::string("train_start") + (t.sanity_checking() ? ":still-sanity" : ""));
  }
  void on_train_end(pl::Trainer&, pl::LightningBase&) override { add("train_end"); }
  void on_train_epoch_start(pl::Trainer& t, pl::LightningBase&) override {
    add("train_epoch_start:" + std::to_string(t.current_epoch()));
  }
  void on_train_epoch_end(pl::Trainer& t, pl::LightningBase&) override {
    add("train_epoch_end:" + std::to_string(t.current_epoch()) +
        (t.callback_metrics().count("val_loss") ? "+val" : ""));
  }
  void on_train_batch_start(pl::Trainer&, pl::LightningBase&, const pl::Batch& b, int64_t i) override {
    add("batch_start:" + std::to_string(i) + ":" + std::to_string(b.at(0).size(0)));
  }
  void on_train_batch_end(pl::Trainer& t, pl::LightningBase&, const pl::Scalar& loss, const pl::Batch&,
                          int64_t i) override {
    add("batch_end:" + std::to_string(i) + ":step" + std::to_string(t.global_step()) +
        (std::isfinite(loss.value()) ? "" : ":nan"));
  }
  void on_before_optimizer_step(pl::Trainer& t, pl::LightningBase&, pl::Optimizer& o) override {
    add("before_opt:" + std::to_string(t.global_step()) + (&o == t.optimizer() ? "" : ":other"));
  }
  void on_validation_start(pl::Trainer&, pl::LightningBase&) override { add("val_start"); }
  void on_validation_end(pl::Trainer&, pl::LightningBase&) override { add("val_end"); }
  void on_validation_epoch_start(pl::Trainer&, pl::LightningBase&) override { add("val_epoch_start"); }
  void on_validation_epoch_end(pl::Trainer&, pl::LightningBase&) override { add("val_epoch_end"); }
  void on_validation_batch_start(pl::Trainer&, pl::LightningBase&, const pl::Batch&, int64_t i) override {
    add("val_batch_start:" + std::to_string(i));
  }
  void on_validation_batch_end(pl::Trainer&, pl::LightningBase&, const pl::Batch&, int64_t i) override {
    add("val_batch_end:" + std::to_string(i));
  }
  void on_test_start(pl::Trainer&, pl::LightningBase&) override { add("test_start"); }
  void on_test_end(pl::Trainer&, pl::LightningBase&) override { add("test_end"); }
  void on_test_epoch_start(pl::Trainer&, pl::LightningBase&) override { add("test_epoch_start"); }
  void on_test_epoch_end(pl::Trainer&, pl::LightningBase&) override { add("test_epoch_end"); }
  void on_test_batch_start(pl::Trainer&, pl::LightningBase&, const pl::Batch&, int64_t i) override {
    add("test_batch_start:" + std::to_string(i));
  }
  void on_test_batch_end(pl::Trainer&, pl::LightningBase&, const pl::Batch&, int64_t i) override {
    add("test_batch_end:" + std::to_string(i));
  }
  void on_exception(pl::Trainer&, pl::LightningBase&, const std::exception& e) override {
    add(std::string("exception:") + e.what());
  }
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// The module's hooks, recorded into the same list as the callback's.
struct HookedModule : Scripted {
  std::vector<std::string>* calls = nullptr;
  void on_fit_start() override { calls->push_back("module:fit_start"); }
  void on_fit_end() override { calls->push_back("module:fit_end"); }
  void on_train_epoch_start() override { calls->push_back("module:train_epoch_start"); }
  void on_train_epoch_end() override { calls->push_back("module:train_epoch_end"); }
  void on_validation_epoch_start() override { calls->push_back("module:val_epoch_start"); }
  void on_validation_epoch_end() override { calls->push_back("module:val_epoch_end"); }
};

TEST(Callbacks, FitCallsLightningsHooksInLightningsOrder) {
  FitRun run;
  run.o.max_epochs = 1;
  run.o.accumulate_grad_batches = 2;  // 3 batches: steps after batches 1 and 2
  auto rec = std::make_shared<Recorder>();
  run.o.callbacks = {rec};
  HookedModule m;
  m.calls = &rec->calls;
  run.fit(m);
  // Lightning's order: callbacks before the module's hook, except at a training epoch's end
  const std::vector<std::string> want{
      "setup:fit", "fit_start", "module:fit_start",
      // the sanity check: the validation hooks around one batch (the loader's only one)
      "sanity_start", "val_start", "val_epoch_start", "module:val_epoch_start", "val_batch_start:0", "val_batch_end:0",
      "val_epoch_end", "module:val_epoch_end", "val_end", "sanity_end", "train_start", "train_epoch_start:0",
      "module:train_epoch_start", "batch_start:0:4", "batch_end:0:step0", "batch_start:1:4", "before_opt:0",
      "batch_end:1:step1", "batch_start:2:4", "before_opt:1", "batch_end:2:step2", "val_start", "val_epoch_start",
      "module:val_epoch_start", "val_batch_start:0", "val_batch_end:0", "val_epoch_end", "module:val_epoch_end",
      "val_end", "train_epoch_end:0+val", "module:train_epoch_end", "train_end", "fit_end", "module:fit_end",
      "teardown:fit"};
  EXPECT_EQ(joined(rec->calls), joined(want));
}

TEST(Callbacks, ValidateAndTestCallTheirStagesHooks) {
  FitRun run;
  auto rec = std::make_shared<Recorder>();
  run.o.callbacks = {rec};
  pl::Trainer trainer(run.o, FitRun::runtime());
  Scripted m;
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  pl::DataLoader val(dataset(8), lo);
  trainer.validate(m, val);
  trainer.test(m, val);
  const std::vector<std::string> want{
      "setup:validate",   "val_start",          "val_epoch_start",  "val_batch_start:0",
      "val_batch_end:0",  "val_batch_start:1",  "val_batch_end:1",  "val_epoch_end",
      "val_end",          "teardown:validate",  "setup:test",       "test_start",
      "test_epoch_start", "test_batch_start:0", "test_batch_end:0", "test_batch_start:1",
      "test_batch_end:1", "test_epoch_end",     "test_end",         "teardown:test"};
  EXPECT_EQ(joined(rec->calls), joined(want));
}

TEST(Callbacks, ConfigureCallbacksReplacesTheTrainersOfTheSameType) {
  FitRun run;
  run.o.max_epochs = 1;
  auto trainer_rec = std::make_shared<Recorder>("trainer");
  auto es = std::make_shared<pl::EarlyStopping>(pl::EarlyStoppingOptions{"val_loss"});
  run.o.callbacks = {trainer_rec, es};
  Scripted m;
  auto module_rec = std::make_shared<Recorder>("module");
  m.own_callbacks = {module_rec};
  run.fit(m, true, "", [&](pl::Trainer& t) {
    ASSERT_EQ(t.callbacks().size(), 3u);
    EXPECT_EQ(t.callbacks()[0].get(), es.get());
    EXPECT_EQ(t.callbacks()[1].get(), module_rec.get());
    EXPECT_NE(dynamic_cast<pl::ModelSummary*>(t.callbacks()[2].get()), nullptr) << "Lightning's default";
  });
  EXPECT_TRUE(trainer_rec->calls.empty());
  EXPECT_FALSE(module_rec->calls.empty());
}

TEST(Callbacks, AnExceptionReachesOnExceptionThenTheCaller) {
  struct Throws : pl::Callback {
    void on_train_epoch_start(pl::Trainer&, pl::LightningBase&) override { throw pl::Error(PL_ERR_RUNTIME, "boom"); }
  };
  FitRun run;
  auto rec = std::make_shared<Recorder>();
  run.o.callbacks = {std::make_shared<Throws>(), rec};
  Scripted m;
  EXPECT_THROW(run.fit(m), pl::Error);
  ASSERT_FALSE(rec->calls.empty());
  EXPECT_THAT(rec->calls.back(), HasSubstr("exception:boom"));
}

TEST(Callbacks, ShouldStopInsideAnEpochStopsAtThatStep) {
  struct StopAtFour : pl::Callback {
    void on_train_batch_end(pl::Trainer& t, pl::LightningBase&, const pl::Scalar&, const pl::Batch&, int64_t) override {
      if (t.global_step() == 4) t.set_should_stop(true);
    }
  };
  FitRun run;
  run.o.max_epochs = 10;
  run.o.callbacks = {std::make_shared<StopAtFour>()};
  Scripted m;
  int64_t steps = 0;
  EXPECT_EQ(run.fit(m, false, "", [&](pl::Trainer& t) { steps = t.global_step(); }), 1) << "inside epoch 1";
  EXPECT_EQ(steps, 4) << "the step the hook set it after (Lightning's)";
}

TEST(Callbacks, ShouldStopAtAnEpochsEndStopsAfterIt) {
  struct StopAtEpochEnd : pl::Callback {
    void on_train_epoch_end(pl::Trainer& t, pl::LightningBase&) override {
      if (t.current_epoch() == 1) t.set_should_stop(true);
    }
  };
  FitRun run;
  run.o.max_epochs = 10;
  run.o.callbacks = {std::make_shared<StopAtEpochEnd>()};
  Scripted m;
  int64_t steps = 0;
  EXPECT_EQ(run.fit(m, false, "", [&](pl::Trainer& t) { steps = t.global_step(); }), 2);
  EXPECT_EQ(steps, 6);
}

TEST(Callbacks, NullOrDuplicateStatefulCallbacksAreNamed) {
  FitRun run;
  run.o.callbacks = {nullptr};
  Scripted m;
  EXPECT_THAT(sdk_test::error_of([&] { run.fit(m); }), HasSubstr("callbacks[0] is null"));
  run.o.callbacks = {std::make_shared<pl::EarlyStopping>(pl::EarlyStoppingOptions{"val_loss"}),
                     std::make_shared<pl::EarlyStopping>(pl::EarlyStoppingOptions{"val_loss"})};
  EXPECT_THAT(sdk_test::error_of([&] { run.fit(m); }),
              HasSubstr("same state_key 'EarlyStopping{monitor=val_loss, mode=min}'"));
}

TEST(Callbacks, StateGoesIntoCheckpointsAndComesBackOnResume) {
  struct Counter : pl::Callback {
    int64_t batches = 0, loaded = -1;
    std::string state_key() const override { return "Counter"; }
    pl::HParams state_dict() const override { return {{"batches", batches}}; }
    void load_state_dict(const pl::HParams& s) override {
      loaded = std::get<int64_t>(s.at("batches").value());
      batches = loaded;
    }
    void on_train_batch_end(pl::Trainer&, pl::LightningBase&, const pl::Scalar&, const pl::Batch&, int64_t) override {
      ++batches;
    }
  };
  FitRun run;
  run.o.max_epochs = 2;
  auto first = std::make_shared<Counter>();
  run.o.callbacks = {first};
  Scripted m1;
  run.fit(m1, false);
  EXPECT_EQ(first->batches, 6);
  run.o.max_epochs = 3;
  auto second = std::make_shared<Counter>();
  run.o.callbacks = {second};
  Scripted m2;
  run.fit(m2, false, "last");
  EXPECT_EQ(second->loaded, 6);
  EXPECT_EQ(second->batches, 9);
}

// metrics.csv's rows: column name -> (step -> value) for the rows that have it.
std::map<std::string, std::map<int64_t, double>> csv_columns(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  std::stringstream hs(line);
  for (std::string c; std::getline(hs, c, ',');) names.push_back(c);
  std::map<std::string, std::map<int64_t, double>> out;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    cells.resize(names.size());
    int64_t step = -1;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == "step") step = std::stoll(cells[i]);
    for (size_t i = 0; i < names.size(); ++i)
      if (!cells[i].empty() && names[i] != "step" && names[i] != "epoch") out[names[i]][step] = std::stod(cells[i]);
  }
  return out;
}

TEST(LearningRateMonitor, WritesTheRateOfEveryLoggedStepToMetricsCsv) {
  FitRun run;
  run.o.max_epochs = 3;
  run.o.log_every_n_steps = 2;
  run.o.callbacks = {std::make_shared<pl::LearningRateMonitor>("step", true)};
  Scripted m;
  m.schedules = [](pl::Optimizer& o) {
    pl::LRSchedulerConfig c;
    c.scheduler = std::make_shared<pl::StepLR>(o, 1, 0.5);  // halves after every epoch
    return std::vector<pl::LRSchedulerConfig>{c};
  };
  std::string dir;
  run.fit(m, false, "", [&](pl::Trainer& t) { dir = t.log_dir(); });
  const auto cols = csv_columns(fs::path(dir) / "metrics.csv");
  ASSERT_TRUE(cols.count("lr-SGD")) << "no lr-SGD column";
  // steps 0..8, 3 per epoch: the rows of steps 1, 3, 5, 7 (every 2nd), each with its epoch's rate
  std::map<int64_t, double> want;
  for (int64_t s = 1; s < 9; s += 2) want[s] = 0.1 * std::pow(0.5, static_cast<double>(s / 3));
  ASSERT_EQ(cols.at("lr-SGD").size(), want.size());
  for (const auto& [s, v] : want) EXPECT_DOUBLE_EQ(cols.at("lr-SGD").at(s), v) << "step " << s;
  for (const auto& [s, v] : cols.at("lr-SGD-momentum")) EXPECT_DOUBLE_EQ(v, 0.9) << "step " << s;
}

TEST(LearningRateMonitor, EpochIntervalWritesOneRowPerEpoch) {
  FitRun run;
  run.o.max_epochs = 3;
  run.o.callbacks = {std::make_shared<pl::LearningRateMonitor>("epoch")};
  Scripted m;
  std::string dir;
  run.fit(m, false, "", [&](pl::Trainer& t) { dir = t.log_dir(); });
  const auto cols = csv_columns(fs::path(dir) / "metrics.csv");
  ASSERT_TRUE(cols.count("lr-SGD"));
  EXPECT_EQ(cols.at("lr-SGD").size(), 3u);  // at steps 0, 3, 6
  EXPECT_TRUE(cols.at("lr-SGD").count(3));
  EXPECT_FALSE(cols.count("lr-SGD-momentum"));
}

TEST(LearningRateMonitor, ABadIntervalIsNamed) {
  EXPECT_THAT(sdk_test::error_of([] { pl::LearningRateMonitor("batch"); }),
              HasSubstr("logging_interval 'batch' is not valid; valid: step, epoch"));
}

}  // namespace
