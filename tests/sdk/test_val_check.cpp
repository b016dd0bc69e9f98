// When fit validates (issue 31): Lightning's val_check_interval and check_val_every_n_epoch, the
// monitoring callbacks at validations inside epochs, and the end of an epoch that max_steps or
// should_stop cut short.  Every count is worked out from the loaders: 40 training samples in
// batches of 4 (10 batches an epoch), 4 validation samples (one batch), no sanity check.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

// The steps (global_step) at which fit's validations ended, and the hooks around an epoch's end.
struct Watch : pl::Callback {
  std::vector<int64_t> val_steps;
  std::vector<std::string> calls;
  void on_validation_end(pl::Trainer& t, pl::LightningBase&) override {
    if (!t.sanity_checking()) val_steps.push_back(t.global_step());
    calls.push_back("val_end:" + std::to_string(t.global_step()));
  }
  void on_train_epoch_end(pl::Trainer& t, pl::LightningBase&) override {
    calls.push_back("train_epoch_end:" + std::to_string(t.current_epoch()));
  }
  void on_train_end(pl::Trainer&, pl::LightningBase&) override { calls.push_back("train_end"); }
};

// Also logs, in every training step, a count summed over the epoch: its epoch value is the
// training batches run, whatever validations ran in between.
struct Counting : Scripted {
  int train_calls = 0;
  pl::Scalar training_step(const pl::Batch& b, int64_t i) override {
    ++train_calls;
    pl::LogOptions o;
    o.on_step = false, o.on_epoch = true, o.reduce_fx = pl::Reduce::Sum;
    log("batches", 1.0, o);
    return Scripted::training_step(b, i);
  }
};

struct Outcome {
  std::vector<int64_t> val_steps;
  std::vector<std::string> calls;
  int64_t steps = 0, epoch = 0;
  int train_calls = 0;
  std::map<std::string, double> metrics;
  std::vector<std::map<std::string, std::string>> rows;  // metrics.csv
};

std::vector<std::map<std::string, std::string>> csv_rows(const fs::path& root) {
  std::vector<std::map<std::string, std::string>> rows;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename() != "metrics.csv") continue;
    std::ifstream in(e.path());
    std::string line;
    std::vector<std::string> header;
    auto split = [](const std::string& l) {
      std::vector<std::string> out;
      std::stringstream ss(l);
      for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
      if (!l.empty() && l.back() == ',') out.emplace_back();
      return out;
    };
    if (std::getline(in, line)) header = split(line);
    while (std::getline(in, line)) {
      const auto f = split(line);
      std::map<std::string, std::string> row;
      for (size_t i = 0; i < header.size() && i < f.size(); ++i)
        if (!f[i].empty()) row[header[i]] = f[i];
      rows.push_back(row);
    }
  }
  return rows;
}

Outcome fit(FitRun& run, bool with_val = true, int64_t train_samples = 40) {
  auto watch = std::make_shared<Watch>();
  run.o.callbacks.push_back(watch);
  pl::Trainer trainer(run.o, FitRun::runtime());
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader train(callback_test::dataset(train_samples), lo), val(callback_test::dataset(4), lo);
  Counting m;
  trainer.fit(m, train, with_val ? &val : nullptr);
  Outcome out{watch->val_steps,
              watch->calls,
              trainer.global_step(),
              trainer.current_epoch(),
              m.train_calls,
              trainer.callback_metrics(),
              {}};
  if (fs::exists(run.dir)) out.rows = csv_rows(run.dir);
  return out;
}

FitRun quiet_run(int64_t epochs) {
  FitRun run;
  run.o.max_epochs = epochs;
  run.o.enable_progress_bar = false;
  run.o.enable_model_summary = false;
  run.o.num_sanity_val_steps = 0;
  return run;
}

std::string steps_text(const std::vector<int64_t>& v) {
  std::string s;
  for (auto x : v) s += std::to_string(x) + " ";
  return s;
}

TEST(ValCheck, ValidationFollowsTheBatchesLightningsRuleNames) {
  struct Case {
    pl::BatchLimit every;
    std::optional<int> every_n_epochs;
    int64_t epochs;
    pl::BatchLimit limit_train;
    std::vector<int64_t> steps;  // global_step at each validation's end
  } cases[] = {
      {1.0, 1, 2, 1.0, {10, 20}},                               // the default: each epoch's last batch
      {0.25, 1, 2, 1.0, {2, 4, 6, 8, 10, 12, 14, 16, 18, 20}},  // int(10 x 0.25) = 2
      {0.3, 1, 1, 1.0, {3, 6, 9}},                              // 3: not at the epoch's last batch
      {0.0, 1, 1, 1.0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},        // max(1, int(0)): every batch
      {4, 1, 2, 1.0, {4, 8, 14, 18}},                           // a count restarts with each epoch
      {4, std::nullopt, 2, 1.0, {4, 8, 12, 16, 20}},            // None: counted across epochs
      {25, std::nullopt, 3, 1.0, {25}},                         // None: more than an epoch's batches
      {4, 2, 4, 1.0, {14, 18, 34, 38}},                         // only in epochs 1 and 3
      {0.5, 1, 2, 6, {3, 6, 9, 12}},                            // of the limited epoch: int(6 x 0.5) = 3
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("val_check_interval=" + c.every.text() +
                 " check_val_every_n_epoch=" + (c.every_n_epochs ? std::to_string(*c.every_n_epochs) : "None") +
                 " limit_train_batches=" + c.limit_train.text());
    FitRun run = quiet_run(c.epochs);
    run.o.val_check_interval = c.every;
    run.o.check_val_every_n_epoch = c.every_n_epochs;
    run.o.limit_train_batches = c.limit_train;
    const Outcome r = fit(run);
    EXPECT_EQ(steps_text(r.val_steps), steps_text(c.steps));
    // one metrics.csv row with val_loss per validation, at the steps taken before it (step - 1)
    std::vector<int64_t> logged;
    for (const auto& row : r.rows)
      if (row.count("val_loss")) logged.push_back(std::stoll(row.at("step")) + 1);
    EXPECT_EQ(steps_text(logged), steps_text(c.steps));
    // the training epoch's sum is its batches alone: validations inside it do not take it
    EXPECT_EQ(r.metrics.at("batches"), static_cast<double>(c.limit_train.is_fraction() ? 10 : c.limit_train.count()));
  }
}

TEST(ValCheck, ModelCheckpointSavesAtEachValidationsEndAndResumesAfterItsBatch) {
  FitRun run = quiet_run(2);
  run.o.val_check_interval = 0.5;  // after batches 4 and 9 of each epoch
  pl::ModelCheckpointOptions co;
  co.monitor = "val_loss";
  co.save_top_k = -1;
  run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(co)};
  const Outcome r = fit(run);
  EXPECT_EQ(steps_text(r.val_steps), "5 10 15 20 ");
  std::vector<std::string> names;
  fs::path mid;
  for (const auto& e : fs::recursive_directory_iterator(run.dir))
    if (e.is_directory() && e.path().parent_path().filename() == "checkpoints" && e.path().filename() != "last") {
      names.push_back(e.path().filename().string());
      if (e.path().filename() == "epoch=0-step=5") mid = e.path();
    }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"epoch=0-step=10", "epoch=0-step=5", "epoch=1-step=15", "epoch=1-step=20"}));
  ASSERT_FALSE(mid.empty());
  std::ifstream in(mid / "trainer.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("epoch"), 0) << j.dump();
  EXPECT_EQ(j.at("samples_done"), 20) << "resumes after the fifth batch: " << j.dump();

  FitRun plain = quiet_run(2);  // val_check_interval 1.0: at each epoch's end, as before
  plain.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(co)};
  fit(plain);
  int saved = 0;
  for (const auto& e : fs::recursive_directory_iterator(plain.dir))
    saved += e.is_directory() && e.path().parent_path().filename() == "checkpoints" && e.path().filename() != "last";
  EXPECT_EQ(saved, 2);
}

TEST(ValCheck, EarlyStoppingStopsRightAfterTheValidationThatDecided) {
  FitRun run = quiet_run(5);
  run.o.val_check_interval = 0.2;  // every 2 batches; val_loss is the same all epoch: no improvement
  pl::EarlyStoppingOptions eo{"val_loss"};
  eo.patience = 2;
  auto es = std::make_shared<pl::EarlyStopping>(eo);
  run.o.callbacks = {es};
  const Outcome r = fit(run);
  EXPECT_EQ(steps_text(r.val_steps), "2 4 6 ") << "first sets the best, two more without improvement";
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.train_calls, 6);
  EXPECT_EQ(r.epoch, 0);
  EXPECT_EQ(es->wait_count(), 2);
  // the stopped epoch still ends: its hooks once, then the train end
  const std::vector<std::string> tail(r.calls.end() - 2, r.calls.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"train_epoch_end:0", "train_end"}));

  FitRun held = quiet_run(5);
  held.o.val_check_interval = 0.2;
  held.o.min_steps = 9;
  held.o.callbacks = {std::make_shared<pl::EarlyStopping>(eo)};
  const Outcome h = fit(held);
  EXPECT_EQ(h.steps, 9) << "min_steps holds the stop back until step 9";
  EXPECT_EQ(steps_text(h.val_steps), "2 4 6 8 9 ") << "the stop at step 9 validates (Lightning's)";
}

TEST(ValCheck, AnEpochThatMaxStepsEndsEarlyRunsItsEndWithoutValidation) {
  FitRun run = quiet_run(5);
  run.o.max_steps = 13;  // epoch 1, batch 2
  const Outcome r = fit(run);
  EXPECT_EQ(r.steps, 13);
  EXPECT_EQ(steps_text(r.val_steps), "10 ") << "max_steps is not a validation point (Lightning's)";
  const std::vector<std::string> want{"val_end:10", "train_epoch_end:0", "train_epoch_end:1", "train_end"};
  EXPECT_EQ(r.calls, want);
  EXPECT_EQ(r.metrics.at("batches"), 3.0) << "the short epoch's values are logged (3 batches)";
  int epoch1_rows = 0;
  for (const auto& row : r.rows) epoch1_rows += row.count("batches") && row.at("epoch") == "1";
  EXPECT_EQ(epoch1_rows, 1);
}

TEST(ValCheck, AShouldStopInsideAnEpochValidatesThenEndsTheEpoch) {
  struct StopAtStep3 : pl::Callback {
    void on_train_batch_end(pl::Trainer& t, pl::LightningBase&, const pl::Scalar&, const pl::Batch&, int64_t) override {
      if (t.global_step() == 3) t.set_should_stop(true);
    }
  };
  FitRun run = quiet_run(5);
  run.o.callbacks = {std::make_shared<StopAtStep3>()};
  const Outcome r = fit(run);
  EXPECT_EQ(r.steps, 3);
  const std::vector<std::string> want{"val_end:3", "train_epoch_end:0", "train_end"};
  EXPECT_EQ(r.calls, want) << "Lightning validates when should_stop ends an epoch";
  EXPECT_TRUE(r.metrics.count("val_loss"));
}

TEST(ValCheck, BadValuesAreNamedBeforeAnyStep) {
  struct Case {
    std::function<void(pl::TrainerOptions&)> set;
    const char* named;
  } at_construction[] = {
      {[](pl::TrainerOptions& o) { o.val_check_interval = 0; }, "val_check_interval=0 is not valid"},
      {[](pl::TrainerOptions& o) { o.val_check_interval = -3; }, "val_check_interval=-3 is not valid"},
      {[](pl::TrainerOptions& o) { o.val_check_interval = 1.5; }, "val_check_interval=1.5 is not valid"},
      {[](pl::TrainerOptions& o) { o.check_val_every_n_epoch = 0; }, "check_val_every_n_epoch=0 is not valid"},
      {[](pl::TrainerOptions& o) {
         o.check_val_every_n_epoch.reset();
         o.val_check_interval = 0.5;
       },
       "val_check_interval=0.5 is a fraction of an epoch, but check_val_every_n_epoch is unset"},
  };
  for (const auto& c : at_construction) {
    SCOPED_TRACE(c.named);
    FitRun run = quiet_run(1);
    c.set(run.o);
    const std::string msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
    EXPECT_NE(msg.find(c.named), std::string::npos) << msg;
  }
  // a count past the epoch's batches is known once the loader is: fit refuses it before any step
  FitRun run = quiet_run(2);
  run.o.val_check_interval = 11;
  int calls = -1;
  const std::string msg = sdk_test::error_of([&] {
    pl::Trainer trainer(run.o, FitRun::runtime());
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    pl::DataLoader train(callback_test::dataset(40), lo), val(callback_test::dataset(4), lo);
    Counting m;
    try {
      trainer.fit(m, train, &val);
    } catch (...) {
      calls = m.train_calls;
      throw;
    }
  });
  EXPECT_NE(msg.find("val_check_interval=11 is more than the 10 training batch(es) of an epoch"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("check_val_every_n_epoch unset (None)"), std::string::npos) << msg;
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(fs::exists(run.dir / "lightning_logs")) << "the error comes before the log folder";
}

TEST(ValCheck, EnvironmentSetsBothKnobsAndNamesABadValue) {
  FitRun run = quiet_run(2);
  run.o.read_env = true;
  ::setenv("PL_TRAINER_VAL_CHECK_INTERVAL", "often", 1);
  std::string msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
  EXPECT_NE(msg.find("PL_TRAINER_VAL_CHECK_INTERVAL='often' is not valid"), std::string::npos) << msg;
  ::setenv("PL_TRAINER_VAL_CHECK_INTERVAL", "4", 1);
  ::setenv("PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH", "sometimes", 1);
  msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
  EXPECT_NE(msg.find("PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH='sometimes' is not valid"), std::string::npos) << msg;
  ::setenv("PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH", "None", 1);
  const Outcome r = fit(run);
  ::unsetenv("PL_TRAINER_VAL_CHECK_INTERVAL");
  ::unsetenv("PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH");
  EXPECT_EQ(steps_text(r.val_steps), "4 8 12 16 20 ");
}

}  // namespace
