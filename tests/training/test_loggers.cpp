// The trainer's loggers end to end (TrainerOptions::logger, plrt-mlp --logger, PL_TRAINER_LOGGER):
// plrt-mlp trained under plrun at two ranks writes metrics.csv, TensorBoard's event file and
// hparams.yaml in lightning_logs/version_0/ (rank 0 only), and tfevents_check.py, a reader written
// from the formats' specifications that shares no code with plrt (its own CRC-32C and protobuf
// decoding), finds every metrics.csv value in the event file with the same tag and step, wall
// times that never go back, and the run's hyperparameters in hparams.yaml (PyYAML).  Bad logger
// names exit 2 naming the valid ones, before any training.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "training_support.hpp"

namespace {

using namespace plrt_training;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> event_files(const fs::path& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path().string());
  return out;
}

plrt_test::ProcessResult check(const fs::path& folder, const nlohmann::json& hparams) {
  return run({PYTHON3_PATH, TFEVENTS_CHECK_PATH, folder.string(), hparams.dump()});
}

TEST(Loggers, TensorBoardHoldsWhatMetricsCsvHoldsUnderPlrunAtTwoRanks) {
  TempDir dir;
  auto r =
      run(plrun("ddp", 2, mlp_args({"--epochs", "3", "--logger", "csv,tensorboard", "--root-dir", dir.path.string()})));
  ASSERT_EQ(r.exit_code, 0) << r.status() << "\n" << r.output;
  const fs::path v0 = dir.path / "lightning_logs" / "version_0";
  ASSERT_TRUE(fs::exists(v0 / "metrics.csv"));
  EXPECT_FALSE(fs::exists(dir.path / "lightning_logs" / "version_1")) << "rank 1 made a folder too";
  EXPECT_EQ(event_files(v0).size(), 1u) << "one event file, rank 0's";
  const nlohmann::json want = {{"lr", 0.05},
                               {"hidden", "16,12"},
                               {"in_features", 24},
                               {"classes", 5},
                               {"optimizer", "sgd"},
                               {"nesterov", false},
                               {"trainer.strategy", "ddp"},
                               {"trainer.world_size", 2},
                               {"trainer.logger", "csv,tensorboard"},
                               {"trainer.max_epochs", 3},
                               {"trainer.seed", 7}};
  auto c = check(v0, want);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_THAT(c.output, HasSubstr("scalar events"));
  // The reader can fail: a tampered byte breaks a CRC, a wrong expectation is named.
  auto wrong = check(v0, {{"lr", 0.5}});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_THAT(wrong.output, HasSubstr("hparams.yaml lr"));
  {
    const std::string path = event_files(v0).at(0);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  auto tampered = check(v0, want);
  EXPECT_EQ(tampered.exit_code, 1) << tampered.output;
  EXPECT_THAT(tampered.output, HasSubstr("CRC"));
}

// A resumed run keeps logging into the same version folder: metrics.csv continues, and a second
// event file holds the later values (Lightning's TensorBoardLogger does the same).
TEST(Loggers, AResumedRunAddsAnEventFileThatContinuesTheValues) {
  TempDir dir;
  const std::vector<std::string> a{"--logger", "csv,tensorboard", "--root-dir", dir.path.string()};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), a.begin(), a.end());
    return plrun("ddp", 2, mlp_args(extra));
  };
  auto r = run(with({"--epochs", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run(with({"--epochs", "3", "--resume", "last"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path v0 = dir.path / "lightning_logs" / "version_0";
  EXPECT_EQ(event_files(v0).size(), 2u);
  auto c = check(v0, {{"trainer.max_epochs", 3}});
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

TEST(Loggers, CsvIsTheDefaultAndTheVariableOverridesTheFlag) {
  TempDir dir;
  auto r = run(mlp_args({"--accelerator", "cpu", "--epochs", "1", "--root-dir", dir.path.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path v0 = dir.path / "lightning_logs" / "version_0";
  EXPECT_TRUE(fs::exists(v0 / "metrics.csv"));
  EXPECT_TRUE(fs::exists(v0 / "hparams.yaml"));
  EXPECT_TRUE(event_files(v0).empty());
  r = run(mlp_args({"--accelerator", "cpu", "--epochs", "1", "--logger", "csv", "--root-dir", dir.path.string()}),
          {{"PL_TRAINER_LOGGER", "tensorboard"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path v1 = dir.path / "lightning_logs" / "version_1";
  EXPECT_FALSE(fs::exists(v1 / "metrics.csv"));
  EXPECT_EQ(event_files(v1).size(), 1u);
  EXPECT_TRUE(fs::exists(v1 / "hparams.yaml"));
}

TEST(Loggers, BadLoggerNamesExitTwoNamingTheValidOnes) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    plrt_test::EnvVars env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--logger", "csv,tensorbord"}, {}, "logger='csv,tensorbord' is not valid: unknown logger 'tensorbord'"},
      {{"--logger", "csv,"}, {}, "an empty logger name"},
      {{"--logger", "csv,csv"}, {}, "'csv' is named twice"},
      {{"--logger", "wandb"}, {}, "unknown logger 'wandb'"},
      {{}, {{"PL_TRAINER_LOGGER", "mlflow"}}, "PL_TRAINER_LOGGER='mlflow' is not valid"},
  };
  for (const auto& c : cases) {
    auto a = c.args;
    a.insert(a.end(), {"--accelerator", "cpu", "--root-dir", dir.path.string()});
    auto r = run(mlp_args(a), c.env);
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says));
    EXPECT_THAT(r.output, HasSubstr("valid: a comma-separated list of csv, tensorboard")) << c.says;
    // under plrun: each worker exits 2, and plrun with it
    auto p = run(plrun("ddp", 2, mlp_args(a)), c.env);
    EXPECT_EQ(p.exit_code, 2) << c.says << ": " << p.output;
    EXPECT_THAT(p.output, HasSubstr(c.says));
  }
  EXPECT_FALSE(fs::exists(dir.path / "lightning_logs")) << "training started";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Lightning's fast_dev_run from plrt-mlp's flag and from plrun's environment: N steps, one epoch,
// nothing written under the root (the Trainer's own counts: tests/sdk/test_loop_limits.cpp).
TEST(Loggers, FastDevRunWritesNoLogsAndNoCheckpoint) {
  TempDir dir;
  const std::string report = (dir.path / "r.json").string();
  fs::create_directories(dir.path / "root");
  auto r = run(mlp_args({"--accelerator", "cpu", "--fast-dev-run", "--save-top-k", "1", "--root-dir",
                         (dir.path / "root").string(), "--report", report}),
               {{"PL_LOG_LEVEL", "info"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              testing::HasSubstr("Running in fast_dev_run mode: will run the requested loop using 1 batch(es)"));
  EXPECT_TRUE(fs::is_empty(dir.path / "root")) << "fast_dev_run wrote under the root";
  const std::string j = slurp(report);
  EXPECT_THAT(j, testing::HasSubstr("\"steps\": 1"));
  EXPECT_THAT(j, testing::HasSubstr("\"epoch\": 1"));
  r = run(mlp_args({"--accelerator", "cpu", "--root-dir", (dir.path / "root").string(), "--report", report}),
          {{"PL_TRAINER_FAST_DEV_RUN", "3"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_empty(dir.path / "root"));
  EXPECT_THAT(slurp(report), testing::HasSubstr("\"steps\": 3"));
}

}  // namespace
