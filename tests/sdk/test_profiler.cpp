// The trainer's profiler (issue 31): TrainerOptions::profiler "simple" writes Lightning's table of
// actions with counts worked out from the loaders (12 training samples in batches of 4: 3 batches
// an epoch; one validation batch), "trace" a Trace Event Format file; bad names are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

namespace fs = std::filesystem;
using callback_test::FitRun;
using callback_test::Scripted;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// action -> calls, from the table's rows "|  action  |  mean  |  calls  |  total  |  share  |"
std::map<std::string, int64_t> calls_of(const std::string& table) {
  std::map<std::string, int64_t> out;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("|  ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string c; std::getline(ss, c, '|');) {
      const auto b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    if (cells.size() >= 3 && cells[0] != "Action") out[cells[0]] = std::stoll(cells[2]);
  }
  return out;
}

TEST(Profiler, SimpleTableCountsEveryActionOfTheFit) {
  FitRun run;
  run.o.max_epochs = 2;
  run.o.enable_progress_bar = false;
  run.o.profiler = "simple";
  std::vector<std::string> lines;
  const pl::RuntimeOptions ro = FitRun::capturing(lines);
  std::string log_dir;
  {
    pl::Trainer trainer(run.o, ro);
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    lo.shuffle = false;
    pl::DataLoader train(callback_test::dataset(12), lo), val(callback_test::dataset(4), lo);
    Scripted m;
    trainer.fit(m, train, &val);
    log_dir = trainer.log_dir();
  }
  const fs::path file = fs::path(log_dir) / "profiler" / "fit-rank0.txt";
  ASSERT_TRUE(fs::exists(file)) << file;
  const std::string table = slurp(file);
  EXPECT_EQ(table.rfind("FIT Profiler Report", 0), 0u) << table;
  const auto calls = calls_of(table);
  const std::map<std::string, int64_t> want{
      {"fit", 1},
      {"run_training_epoch", 2},
      {"run_training_batch", 6},
      {"train_dataloader_next", 6},
      {"[LightningModule]callback_test::Scripted.training_step", 6},
      {"optimizer_step", 6},
      {"[Strategy]single_device.after_backward", 6},
      {"run_sanity_check", 1},
      {"run_validation", 2},
      {"[LightningModule]callback_test::Scripted.validation_step", 3},  // sanity + 2 epochs
      {"save_checkpoint", 2},                                           // checkpoints/last per epoch
      {"[Callback]pl::ModelSummary.on_fit_start", 1},
      {"[Callback]pl::ModelSummary.on_train_batch_end", 6},
  };
  for (const auto& [action, n] : want) {
    SCOPED_TRACE(action);
    ASSERT_TRUE(calls.count(action)) << table;
    EXPECT_EQ(calls.at(action), n) << table;
  }
  EXPECT_FALSE(calls.count("clip_gradients")) << "clipping is off: not timed";
  int printed = 0;
  for (const auto& l : lines) printed += l.find("FIT Profiler Report") != std::string::npos;
  EXPECT_EQ(printed, 1) << "rank 0 prints the table once";
  EXPECT_FALSE(fs::exists(fs::path(log_dir) / "profiler" / "rank0.trace.json")) << "simple writes no trace";
}

TEST(Profiler, TraceWritesNestedOrderedTraceEvents) {
  FitRun run;
  run.o.max_epochs = 1;
  run.o.enable_progress_bar = false;
  run.o.profiler = "trace";
  std::string log_dir;
  {
    pl::Trainer trainer(run.o, FitRun::runtime());
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    pl::DataLoader train(callback_test::dataset(12), lo);
    Scripted m;
    trainer.fit(m, train);
    log_dir = trainer.log_dir();
  }
  const auto doc = nlohmann::json::parse(slurp(fs::path(log_dir) / "profiler" / "rank0.trace.json"));
  ASSERT_TRUE(doc.at("traceEvents").is_array());
  double last_ts = -1;
  std::vector<std::pair<double, std::string>> open;  // end, name
  std::map<std::string, int> seen;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M") continue;
    ASSERT_EQ(e.at("ph"), "X") << e.dump();
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    EXPECT_GE(ts, last_ts) << "events sorted by start: " << e.dump();
    EXPECT_GE(dur, 0.0);
    EXPECT_EQ(e.at("pid"), 0);
    last_ts = ts;
    while (!open.empty() && open.back().first <= ts + 0.002) open.pop_back();
    if (!open.empty()) {
      EXPECT_LE(ts + dur, open.back().first + 0.002) << e.dump() << " overlaps " << open.back().second;
    }
    open.emplace_back(ts + dur, e.at("name").get<std::string>());
    ++seen[e.at("name").get<std::string>()];
  }
  EXPECT_EQ(seen["fit"], 1);
  EXPECT_EQ(seen["run_training_batch"], 3);
  EXPECT_EQ(seen["optimizer_step"], 3);
}

TEST(Profiler, ABadNameIsRefusedNamingTheValidOnes) {
  FitRun run;
  run.o.profiler = "fancy";
  std::string msg = sdk_test::error_of([&] { pl::Trainer t(run.o, FitRun::runtime()); });
  EXPECT_NE(msg.find("profiler='fancy' is not valid; valid: simple"), std::string::npos) << msg;
  FitRun env_run;
  env_run.o.read_env = true;
  ::setenv("PL_TRAINER_PROFILER", "advanced", 1);
  msg = sdk_test::error_of([&] { pl::Trainer t(env_run.o, FitRun::runtime()); });
  ::unsetenv("PL_TRAINER_PROFILER");
  EXPECT_NE(msg.find("PL_TRAINER_PROFILER='advanced' is not valid"), std::string::npos) << msg;
}

}  // namespace
