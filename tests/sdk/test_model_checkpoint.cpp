// pl::ModelCheckpoint against Lightning's meaning: file names from the template, the top k by a
// monitored value (the expected set computed here by sorting the scripted values), save_last,
// every_n_train_steps / every_n_epochs, state across a resume, and each bad option named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <plrt/sdk/model_checkpoint.hpp>
#include <set>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace callback_test;

// The checkpoint folders under `dir` (names), `last` included.
std::set<std::string> folders(const fs::path& dir) {
  std::set<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && fs::exists(e.path() / "trainer.json")) out.insert(e.path().filename().string());
  return out;
}

// Lightning's top k of a script: the epochs of the k best values (ties: the earlier epoch stays).
std::set<int64_t> top_k_epochs(const std::vector<double>& script, size_t k, bool min) {
  std::vector<int64_t> idx(script.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return min ? script[static_cast<size_t>(a)] < script[static_cast<size_t>(b)]
               : script[static_cast<size_t>(a)] > script[static_cast<size_t>(b)];
  });
  idx.resize(std::min(k, idx.size()));
  return {idx.begin(), idx.end()};
}

std::string name_for(int64_t epoch, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "epoch=%lld-val_loss=%.2f", static_cast<long long>(epoch), value);
  return buf;
}

TEST(ModelCheckpoint, NamesFollowTheTemplate) {
  pl::ModelCheckpoint plain;
  EXPECT_EQ(plain.format_checkpoint_name({{"epoch", 2}, {"step", 30}}), "epoch=2-step=30");
  pl::ModelCheckpointOptions o;
  o.filename = "{epoch:02d}-{val_loss:.3f}-{val_acc}";
  pl::ModelCheckpoint spec(o);
  EXPECT_EQ(spec.format_checkpoint_name({{"epoch", 2}, {"val_loss", 0.12345}, {"val_acc", 0.1}}),
            "epoch=02-val_loss=0.123-val_acc=0.1");
  EXPECT_EQ(spec.format_checkpoint_name({{"epoch", 7}}), "epoch=07-val_loss=0.000-val_acc=0")
      << "a value not logged is 0, as Lightning's";
  o.filename = "best_{epoch}_{val_loss:.1e}";
  o.auto_insert_metric_name = false;
  EXPECT_EQ(pl::ModelCheckpoint(o).format_checkpoint_name({{"epoch", 3}, {"val_loss", 0.125}}), "best_3_1.2e-01");
}

TEST(ModelCheckpoint, BadOptionsAreNamed) {
  auto err = [](auto edit) {
    pl::ModelCheckpointOptions o;
    edit(o);
    return sdk_test::error_of([&] { pl::ModelCheckpoint c(o); });
  };
  EXPECT_THAT(err([](auto& o) { o.mode = "best"; }), HasSubstr("mode 'best' is not valid; valid: min, max"));
  EXPECT_THAT(err([](auto& o) { o.save_top_k = -2; }), HasSubstr("save_top_k -2 is not valid"));
  EXPECT_THAT(err([](auto& o) { o.save_top_k = 3; }), HasSubstr("save_top_k 3 without a monitor"));
  EXPECT_THAT(err([](auto& o) { o.every_n_train_steps = -1; }), HasSubstr("every_n_train_steps -1 is not valid"));
  EXPECT_THAT(err([](auto& o) { o.every_n_epochs = -3; }), HasSubstr("every_n_epochs -3 is not valid"));
  EXPECT_THAT(err([](auto& o) { o.every_n_train_steps = 5, o.every_n_epochs = 1; }), HasSubstr("exclude each other"));
  EXPECT_THAT(err([](auto& o) { o.filename = "{epoch:>5s}"; }), HasSubstr("format spec '>5s' of {epoch}"));
  EXPECT_THAT(err([](auto& o) { o.filename = "{epoch"; }), HasSubstr("not closed"));
  EXPECT_THAT(err([](auto& o) { o.filename = "{}"; }), HasSubstr("empty or bad field '{}'"));
}

struct TopK {
  std::vector<double> script{0.5, 0.3, 0.4, 0.2, 0.6};
  void check(const std::string& mode, int64_t k) {
    FitRun run;
    run.o.max_epochs = static_cast<int64_t>(script.size());
    pl::ModelCheckpointOptions o;
    o.monitor = "val_loss";
    o.mode = mode;
    o.save_top_k = k;
    o.filename = "{epoch}-{val_loss:.2f}";
    auto mc = std::make_shared<pl::ModelCheckpoint>(o);
    run.o.callbacks = {mc};
    Scripted m;
    m.val_script = script;
    std::string dir;
    run.fit(m, true, "", [&](pl::Trainer& t) { dir = t.log_dir() + "/checkpoints"; });
    std::set<std::string> want{"last"};
    const auto epochs = top_k_epochs(script, k < 0 ? script.size() : static_cast<size_t>(k), mode == "min");
    for (int64_t e : epochs) want.insert(name_for(e, script[static_cast<size_t>(e)]));
    EXPECT_EQ(folders(dir), want) << mode << " top " << k;
    ASSERT_FALSE(epochs.empty());
    const int64_t best = *std::min_element(epochs.begin(), epochs.end(), [&](int64_t a, int64_t b) {
      return mode == "min" ? script[static_cast<size_t>(a)] < script[static_cast<size_t>(b)]
                           : script[static_cast<size_t>(a)] > script[static_cast<size_t>(b)];
    });
    EXPECT_EQ(mc->best_model_path(), dir + "/" + name_for(best, script[static_cast<size_t>(best)]));
    EXPECT_DOUBLE_EQ(mc->best_model_score(), script[static_cast<size_t>(best)]);
    EXPECT_EQ(mc->best_k_models().size(), epochs.size());
  }
};

TEST(ModelCheckpoint, KeepsTheTopKByTheMonitor) {
  TopK t;
  t.check("min", 2);
  t.check("max", 2);
  t.check("min", 1);
  t.check("min", -1);
}

TEST(ModelCheckpoint, WithoutAMonitorKeepsTheNewest) {
  FitRun run;
  run.o.max_epochs = 3;
  auto mc = std::make_shared<pl::ModelCheckpoint>();
  run.o.callbacks = {mc};
  Scripted m;
  std::string dir;
  run.fit(m, true, "", [&](pl::Trainer& t) { dir = t.log_dir() + "/checkpoints"; });
  EXPECT_EQ(folders(dir), (std::set<std::string>{"epoch=2-step=9", "last"}));
  EXPECT_EQ(mc->best_model_path(), dir + "/epoch=2-step=9");
}

TEST(ModelCheckpoint, EveryNTrainStepsAndEveryNEpochs) {
  {
    FitRun run;
    run.o.max_epochs = 5;  // 15 steps, 3 per epoch
    pl::ModelCheckpointOptions o;
    o.every_n_train_steps = 4;
    o.save_top_k = -1;
    run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(o)};
    Scripted m;
    std::string dir;
    run.fit(m, true, "", [&](pl::Trainer& t) { dir = t.log_dir() + "/checkpoints"; });
    EXPECT_EQ(folders(dir), (std::set<std::string>{"epoch=1-step=4", "epoch=2-step=8", "epoch=3-step=12", "last"}));
    // a step checkpoint resumes inside its epoch: after 4 steps, one batch of epoch 1 done
    auto j = nlohmann::json::parse(std::ifstream(dir + "/epoch=1-step=4/trainer.json"));
    EXPECT_EQ(j["epoch"], 1);
    EXPECT_EQ(j["global_step"], 4);
    EXPECT_EQ(j["samples_done"], 4);
  }
  {
    FitRun run;
    run.o.max_epochs = 5;
    pl::ModelCheckpointOptions o;
    o.every_n_epochs = 2;
    o.save_top_k = -1;
    o.dirpath = (run.dir / "mine").string();
    o.save_last = true;
    run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(o)};
    Scripted m;
    run.fit(m);
    EXPECT_EQ(folders(run.dir / "mine"), (std::set<std::string>{"epoch=1-step=6", "epoch=3-step=12", "last"}));
    // an epoch-end checkpoint resumes at the next epoch's start
    auto j = nlohmann::json::parse(std::ifstream((run.dir / "mine/epoch=1-step=6/trainer.json").string()));
    EXPECT_EQ(j["epoch"], 2);
    EXPECT_EQ(j["samples_done"], 0);
    EXPECT_EQ(j["global_step"], 6);
  }
}

TEST(ModelCheckpoint, ResumedRunGoesOnWithTheSameTopK) {
  const std::vector<double> script{0.5, 0.3, 0.4, 0.2, 0.6};
  FitRun run;
  pl::ModelCheckpointOptions o;
  o.monitor = "val_loss";
  o.save_top_k = 2;
  o.filename = "{epoch}-{val_loss:.2f}";
  run.o.max_epochs = 3;
  run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(o)};
  Scripted m1;
  m1.val_script = script;
  std::string dir;
  run.fit(m1, true, "", [&](pl::Trainer& t) { dir = t.log_dir() + "/checkpoints"; });
  EXPECT_EQ(folders(dir), (std::set<std::string>{name_for(1, 0.3), name_for(2, 0.4), "last"}));
  run.o.max_epochs = 5;
  auto mc = std::make_shared<pl::ModelCheckpoint>(o);
  run.o.callbacks = {mc};
  Scripted m2;
  m2.val_script = script;
  run.fit(m2, true, "last");
  EXPECT_EQ(folders(dir), (std::set<std::string>{name_for(1, 0.3), name_for(3, 0.2), "last"}))
      << "the resumed run dropped the first run's epoch 2";
  EXPECT_EQ(mc->best_model_path(), dir + "/" + name_for(3, 0.2));
}

TEST(ModelCheckpoint, ANonFiniteValueRanksLastAlsoAcrossAResume) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  pl::ModelCheckpointOptions o;
  o.monitor = "val_loss";
  o.filename = "{epoch}";
  {
    FitRun run;
    run.o.max_epochs = 3;
    auto mc = std::make_shared<pl::ModelCheckpoint>(o);
    run.o.callbacks = {mc};
    Scripted m;
    m.val_script = {nan, 0.5, 0.3};
    run.fit(m);
    EXPECT_THAT(mc->best_model_path(), ::testing::EndsWith("/epoch=2"));
    EXPECT_DOUBLE_EQ(mc->best_model_score(), 0.3);
  }
  FitRun run;  // the NaN entry saved in trainer.json, then resumed
  run.o.max_epochs = 1;
  run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(o)};
  Scripted m1;
  m1.val_script = {nan, 0.5};
  run.fit(m1);
  run.o.max_epochs = 2;
  auto mc = std::make_shared<pl::ModelCheckpoint>(o);
  run.o.callbacks = {mc};
  Scripted m2;
  m2.val_script = m1.val_script;
  run.fit(m2, true, "last");
  EXPECT_THAT(mc->best_model_path(), ::testing::EndsWith("/epoch=1"));
  EXPECT_DOUBLE_EQ(mc->best_model_score(), 0.5);
}

TEST(ModelCheckpoint, AStepCheckBeforeTheFirstValidationWaitsForTheMonitor) {
  FitRun run;
  run.o.max_epochs = 2;  // steps 1..6; validation after steps 3 and 6
  pl::ModelCheckpointOptions o;
  o.monitor = "val_loss";
  o.every_n_train_steps = 2;
  auto mc = std::make_shared<pl::ModelCheckpoint>(o);
  run.o.callbacks = {mc};
  Scripted m;
  m.val_script = {0.5, 0.3};
  std::string dir;
  // step 2: no val_loss yet (a warning); step 4: epoch 0's 0.5 is saved; step 6: still 0.5, not better
  run.fit(m, true, "", [&](pl::Trainer& t) { dir = t.log_dir() + "/checkpoints"; });
  EXPECT_EQ(folders(dir), (std::set<std::string>{"epoch=1-step=4", "last"}));
}

TEST(ModelCheckpoint, AMonitorNeverLoggedIsAnError) {
  FitRun run;
  pl::ModelCheckpointOptions o;
  o.monitor = "val_acc";
  run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>(o)};
  Scripted m;
  const std::string e = sdk_test::error_of([&] { run.fit(m); });
  EXPECT_THAT(e, HasSubstr("ModelCheckpoint(monitor='val_acc') found no logged value"));
  EXPECT_THAT(e, HasSubstr("logged: train_loss, val_loss"));
}

TEST(ModelCheckpoint, NeedsCheckpointingOn) {
  FitRun run;
  run.o.enable_checkpointing = false;
  run.o.callbacks = {std::make_shared<pl::ModelCheckpoint>()};
  Scripted m;
  EXPECT_THAT(sdk_test::error_of([&] { run.fit(m); }), HasSubstr("enable_checkpointing=false"));
}

}  // namespace

namespace {

// ddp_spawn: the callbacks run in the forked workers; fit hands rank 0's final state back to this
// process's callback objects (Lightning returns best_model_path from its spawned workers).
TEST(ModelCheckpoint, DdpSpawnHandsTheWorkersStateBack) {
  FitRun run;
  run.o.strategy = "ddp_spawn";
  run.o.devices = 2;
  run.o.enable_progress_bar = false;  // the workers log at info
  run.o.max_epochs = 3;
  pl::ModelCheckpointOptions o;
  o.monitor = "val_loss";
  o.filename = "{epoch}-{val_loss:.2f}";
  auto mc = std::make_shared<pl::ModelCheckpoint>(o);
  run.o.callbacks = {mc};
  Scripted m;
  m.val_script = {0.5, 0.25, 0.75};
  run.fit(m);
  EXPECT_THAT(mc->best_model_path(), ::testing::EndsWith("/checkpoints/epoch=1-val_loss=0.25"));
  EXPECT_DOUBLE_EQ(mc->best_model_score(), 0.25);
  EXPECT_TRUE(fs::exists(mc->best_model_path() + "/trainer.json"));
}

}  // namespace
