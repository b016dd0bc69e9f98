// plrt-torch-cnn (samples/torch_cnn: a libtorch CNN in a pl::torch::LightningModule, trained by
// pl::Trainer) on scikit-learn's digits (scripts/get-digits) under plrun ddp at 2 processes: held-out
// accuracy >= 0.97 in 15 epochs.  The Trainer's knobs reach this kind of module: --fast-dev-run
// leaves no lightning_logs/ and no checkpoint; a fit's checkpoint resumes.  Bad values exit 2
// naming them, before any work (no lightning_logs/ written).  Skipped, saying why, where the
// sample was not built (no libtorch-dev) or Debian's python3 lacks scikit-learn.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Dir {
  fs::path path = fs::temp_directory_path() / ("plrt_torch_cnn_" + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
};

plrt_test::ProcessResult run(std::vector<std::string> argv, const fs::path& cwd, int seconds = 150) {
  plrt_test::ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.cwd = cwd.string();
  spec.env = {{"PL_LOG_LEVEL", "warn"}};
  spec.unset_env = {"RANK",         "WORLD_SIZE",         "LOCAL_RANK",   "MASTER_ADDR",  "MASTER_PORT",
                    "PL_JOB_TOKEN", "PL_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK"};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(seconds);
  return plrt_test::run_job({spec}, w).processes.at(0);
}

class TorchCnn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::string(TORCH_CNN_PATH).empty()) return;
    if (::access(PYTHON3_PATH, X_OK) != 0) return;
    auto made = run({PYTHON3_PATH, GET_DIGITS_PATH, dir().path.string()}, dir().path);
    if (made.exit_code == 0) digits() = (dir().path / "digits.safetensors").string();
  }
  static Dir& dir() {
    static Dir d;
    return d;
  }
  static std::string& digits() {
    static std::string path;
    return path;
  }
  void SetUp() override {
    if (std::string(TORCH_CNN_PATH).empty()) GTEST_SKIP() << "plrt-torch-cnn was not built (no libtorch-dev)";
    if (digits().empty()) GTEST_SKIP() << "scripts/get-digits did not run (Debian's python3 with python3-sklearn)";
    work = dir().path / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(work);
  }
  fs::path work;
};

TEST_F(TorchCnn, DigitsUnderDdpAtTwoProcessesReachNinetySevenPercent) {
  auto r = run({PLRUN_PATH, "--strategy", "ddp", "--devices", "2", "--", TORCH_CNN_PATH, "--data", digits(), "--epochs",
                "15", "--report", "report.json", "--no-progress-bar"},
               work);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(work / "report.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["strategy"], "ddp");
  EXPECT_GE(j["metrics"]["val_acc"].get<double>(), 0.97) << j.dump(2);
  EXPECT_TRUE(fs::exists(work / "lightning_logs/version_0/checkpoints/last/model.safetensors"));
  EXPECT_TRUE(fs::exists(work / "lightning_logs/version_0/hparams.yaml"));
}

TEST_F(TorchCnn, FastDevRunLeavesNoLogsAndACheckpointResumes) {
  auto quick = run({TORCH_CNN_PATH, "--data", digits(), "--fast-dev-run", "2", "--no-progress-bar"}, work);
  ASSERT_EQ(quick.exit_code, 0) << quick.output;
  EXPECT_FALSE(fs::exists(work / "lightning_logs")) << quick.output;
  auto first = run({TORCH_CNN_PATH, "--data", digits(), "--epochs", "1", "--limit-train-batches", "5",
                    "--no-progress-bar", "--report", "first.json"},
                   work);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto more = run({TORCH_CNN_PATH, "--data", digits(), "--epochs", "2", "--limit-train-batches", "5",
                   "--no-progress-bar", "--resume", "last", "--report", "more.json"},
                  work);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  std::ifstream f(work / "more.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["steps"], 10) << "5 steps resumed, 5 more";
  EXPECT_THAT(j["resumed_from"].get<std::string>(), HasSubstr("checkpoints/last"));
}

TEST_F(TorchCnn, BadValuesExitTwoNamingThemBeforeAnyWork) {
  const fs::path narrow = work / "narrow.safetensors";
  {
    // x with 10 features: not 8x8 images
    auto made = run({PYTHON3_PATH, "-c",
                     "import json,struct,sys\n"
                     "h=json.dumps({'x':{'dtype':'F32','shape':[4,10],'data_offsets':[0,160]},"
                     "'y':{'dtype':'I64','shape':[4],'data_offsets':[160,192]}}).encode()\n"
                     "h+=b' '*(-len(h)%8)\n"
                     "open(sys.argv[1],'wb').write(struct.pack('<Q',len(h))+h+bytes(160)+struct.pack('<4q',0,1,2,3))\n",
                     narrow.string()},
                    work);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch-size", "0"}, "--batch-size 0"},
      {{"--precision", "16-mixed"}, "precision '16-mixed' for a libtorch module"},
      {{"--strategy", "dp", "--devices", "2"}, "use strategy ddp"},
      {{"--limit-train-batches", "1.5"}, "--limit-train-batches"},
      {{"--val-check-interval", "0"}, "val_check_interval=0 is not valid"},
      {{"--check-val-every-n-epoch", "0"}, "--check-val-every-n-epoch '0'"},
      {{"--profiler", "fancy"}, "fancy"},
      {{"--data", narrow.string()}, "reads 8x8 images (64)"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv{TORCH_CNN_PATH, "--no-progress-bar"};
    if (args.at(0) != "--data") argv.insert(argv.end(), {"--data", digits()});
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run(argv, work);
    EXPECT_EQ(r.exit_code, 2) << args.at(0) << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(expected)) << args.at(0);
    EXPECT_FALSE(fs::exists(work / "lightning_logs")) << args.at(0) << " did work before its error";
  }
}

}  // namespace
