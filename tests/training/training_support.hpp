// Helpers of the training tests: run plrun / plrt-mlp as a user would and compare saved weights.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace plrt_training {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/plrt-training-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// A small problem so that every run takes well under a second of compute.  A flag of `extra`
// replaces the default of the same name (plrt-mlp refuses a flag given twice); with --data the
// synthetic set's --features, --samples and --classes are left out.
inline std::vector<std::string> mlp_args(const std::vector<std::string>& extra) {
  const std::vector<std::pair<std::string, std::string>> defaults{{"--features", "24"}, {"--hidden", "16,12"},
                                                                  {"--classes", "5"},   {"--samples", "2400"},
                                                                  {"--seed", "7"},      {"--lr", "0.05"}};
  std::vector<std::string> a{MLP_PATH, "--no-shuffle"};
  auto given = [&](const std::string& flag) { return std::find(extra.begin(), extra.end(), flag) != extra.end(); };
  for (const auto& [flag, value] : defaults)
    if (!given(flag) && !(given("--data") && (flag == "--features" || flag == "--samples" || flag == "--classes")))
      a.insert(a.end(), {flag, value});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline plrt_test::ProcessResult run(std::vector<std::string> argv, plrt_test::EnvVars env = {}) {
  plrt_test::ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.env = std::move(env);
  const bool level =
      std::any_of(spec.env.begin(), spec.env.end(), [](const auto& kv) { return kv.first == "PL_LOG_LEVEL"; });
  if (!level) spec.env.emplace_back("PL_LOG_LEVEL", "warn");  // unless the test asks for another
  spec.unset_env = {"RANK",         "WORLD_SIZE",         "LOCAL_RANK",   "MASTER_ADDR",  "MASTER_PORT",
                    "PL_JOB_TOKEN", "PL_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK"};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(120);
  auto result = plrt_test::run_job({spec}, w);
  return result.processes.at(0);
}

inline std::vector<std::string> plrun(const std::string& strategy, int devices, std::vector<std::string> program) {
  std::vector<std::string> a{PLRUN_PATH,  "--accelerator",         "cpu", "--strategy", strategy,
                             "--devices", std::to_string(devices), "--"};
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

inline std::map<std::string, std::vector<float>> weights(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : pl::safetensors::load(path).tensors) out[name] = t.to_vector<float>();
  return out;
}

// ||a - b|| / ||b|| over all parameters together.
inline double relative_difference(const std::string& a_path, const std::string& b_path) {
  auto a = weights(a_path), b = weights(b_path);
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (auto& [name, wb] : b) {
    auto it = a.find(name);
    if (it == a.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(it->second.size(), wb.size()) << name;
    for (size_t i = 0; i < wb.size() && i < it->second.size(); ++i) {
      double d = static_cast<double>(it->second[i]) - wb[i];
      diff += d * d;
      norm += static_cast<double>(wb[i]) * wb[i];
    }
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

// The JSON summary plrt-mlp --report wrote.
inline nlohmann::json report(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "no report at " << path;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(in);
}

}  // namespace plrt_training

#define EXPECT_RAN(r) EXPECT_TRUE((r).ok()) << (r).status() << "\n" << (r).output
