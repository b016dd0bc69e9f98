// The helpers of the tests that compare plrt::torch with PyTorch run from Debian's python3
// (test_torch_ddp.cpp, test_torch_lightning_pytorch.cpp): a bounded child process with no
// launcher's variables, whether the reference can run here, a temporary folder, and the largest
// difference between two safetensors files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <plrt/sdk/safetensors.hpp>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace plrt_libtorch_test {

namespace fs = std::filesystem;

// argv run to its end (at most `seconds`), with PL_LOG_LEVEL=warn and none of the launchers' variables.
inline plrt_test::ProcessResult run(std::vector<std::string> argv, int seconds = 150) {
  plrt_test::ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.env = {{"PL_LOG_LEVEL", "warn"}};
  spec.unset_env = {"RANK",         "WORLD_SIZE",           "LOCAL_RANK",          "MASTER_ADDR",
                    "MASTER_PORT",  "PL_JOB_TOKEN",         "PL_USE_AGENT_STORE",  "SLURM_PROCID",
                    "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "PL_TRAINER_STRATEGY", "PL_TRAINER_DEVICES"};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(seconds);
  return plrt_test::run_job({spec}, w).processes.at(0);
}

// Why the PyTorch reference cannot run here (empty when it can).
inline std::string unavailable() {
  if (::access(PYTHON3_PATH, X_OK) != 0) return "no Debian python3 for the PyTorch DDP reference";
  auto r = run({PYTHON3_PATH, "-c", "import torch.distributed as d; assert d.is_available()"});
  if (!r.ok()) return "python3 cannot import torch.distributed (scripts/setup.sh installs python3-torch)";
  return "";
}

// A folder of its own under /tmp, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/plrt-libtorch-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The largest |a - b| over every tensor of b (a failure for one missing or misshaped in a).
inline double max_difference(const std::string& a_path, const std::string& b_path) {
  auto a = pl::safetensors::load(a_path).tensors;
  auto b = pl::safetensors::load(b_path).tensors;
  EXPECT_EQ(a.size(), b.size()) << a_path << " vs " << b_path;
  double worst = 0;
  for (auto& [name, tb] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.numel() != tb.numel() || it->second.dtype() != tb.dtype()) {
      ADD_FAILURE() << name << " missing, or of another size or dtype, in " << a_path;
      return INFINITY;
    }
    if (tb.dtype() == PL_I64) {
      auto va = it->second.to_vector<int64_t>(), vb = tb.to_vector<int64_t>();
      for (size_t i = 0; i < vb.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(va[i] - vb[i])));
    } else {
      auto va = it->second.to_vector<float>(), vb = tb.to_vector<float>();
      for (size_t i = 0; i < vb.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(va[i]) - vb[i]));
    }
  }
  return worst;
}

}  // namespace plrt_libtorch_test
