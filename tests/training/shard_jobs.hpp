// Helpers of the sharded-checkpoint tests (test_sharded_checkpoint.cpp, test_sharded_resume.cpp):
// a job of shard_worker under plrun, the largest difference between two runs' weights, a folder's
// file names.
#pragma once

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "training_support.hpp"

namespace plrt_training {

// One job of shard_worker: its result, every rank's report, rank 0's checkpoint folder.
struct Job {
  plrt_test::ProcessResult result;
  std::vector<nlohmann::json> ranks;
  std::string ckpt;
  const nlohmann::json& weights() const { return ranks.at(0).at("weights"); }
};

// `strategy` is a strategy's name, optionally with options: "ddp_sharded:stage=1" (plrun
// --strategy-option stage=1; several separated by ','); `kill` is one of shard_worker's kill modes.
inline Job job(const TempDir& dir, const std::string& strategy, int devices, int64_t epochs,
               const std::string& resume = "-", const std::string& optimizer = "adam", const std::string& kill = "") {
  const size_t colon = strategy.find(':');
  const std::string name = strategy.substr(0, colon);
  std::vector<std::string> a{PLRUN_PATH,  "--accelerator",         "cpu",           "--strategy",        name,
                             "--devices", std::to_string(devices), "--plugin-path", PLRT_TEST_PLUGIN_DIR};
  for (size_t at = colon; at != std::string::npos && at + 1 < strategy.size();) {
    const size_t next = strategy.find(',', at + 1);
    a.insert(a.end(), {"--strategy-option", strategy.substr(at + 1, next == std::string::npos ? next : next - at - 1)});
    at = next;
  }
  a.insert(a.end(),
           {"--", SHARD_WORKER_PATH, dir / "out", dir.path.string(), name, std::to_string(epochs), optimizer, resume});
  if (!kill.empty()) a.push_back(kill);
  Job j;
  j.result = run(a);
  for (int r = 0; r < devices; ++r) {
    std::ifstream in(dir / ("out.rank" + std::to_string(r)));
    j.ranks.push_back(in ? nlohmann::json::parse(in) : nlohmann::json::object());
  }
  if (j.ranks[0].contains("log_dir")) j.ckpt = j.ranks[0]["log_dir"].get<std::string>() + "/checkpoints/last";
  return j;
}

#define ASSERT_JOB(j) ASSERT_TRUE((j).result.ok()) << (j).result.status() << "\n" << (j).result.output

// The largest |a - b| over every weight.
inline double max_difference(const nlohmann::json& a, const nlohmann::json& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (auto& [name, values] : b.items()) {
    if (!a.contains(name)) {
      ADD_FAILURE() << "no " << name;
      continue;
    }
    const auto x = a.at(name).get<std::vector<float>>(), y = values.get<std::vector<float>>();
    EXPECT_EQ(x.size(), y.size()) << name;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      worst = std::max(worst, std::abs(static_cast<double>(x[k]) - y[k]));
  }
  return worst;
}

inline std::set<std::string> files_in(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.insert(e.path().filename().string());
  return out;
}

}  // namespace plrt_training
