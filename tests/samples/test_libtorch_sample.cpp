// plrt-libtorch (samples/libtorch, plrt::torch's DistributedDataParallel) under plrun (ddp, bagua, ddp_sharded,
// horovod) against PyTorch's own DistributedDataParallel (gloo): the same initial weights (written by the sample alone,
// read by both), the same synthetic batches per rank, the same SGD; after N steps every weight agrees to 1e-5.  The
// reference (samples/libtorch/torch_ddp_reference.py) uses nothing of plrt.  Skipped, saying why, where the sample was
// not built (no libtorch-dev) or Debian's python3 cannot import torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <string>
#include <vector>

#include "python_reference.hpp"  // tests/libtorch: run, unavailable, TempDir, max_difference

namespace {

namespace fs = std::filesystem;
using namespace plrt_libtorch_test;

constexpr int kSteps = 20, kBatch = 16;

std::vector<std::string> common_args() {
  return {"--steps", std::to_string(kSteps), "--batch-size", std::to_string(kBatch), "--warmup", "0"};
}

// Why these tests cannot run here ("" when they can).
std::string sample_unavailable() {
  if (std::string(LIBTORCH_SAMPLE_PATH).empty())
    return "samples/libtorch was not built: libtorch was not found (scripts/setup.sh installs libtorch-dev)";
  return unavailable();  // the PyTorch reference's needs
}

// One test for every strategy, so that PyTorch's run (the slow part: two Python processes importing
// torch) happens once: the sample alone writes the initial weights, PyTorch DDP trains from them,
// then plrun trains the sample from them under each strategy.
TEST(LibtorchSample, WeightsAfterTrainingEqualPyTorchDdpUnderEachStrategy) {
  if (const std::string why = sample_unavailable(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string init = dir / "init.safetensors", reference = dir / "torch_ddp.safetensors";
  auto made = run({LIBTORCH_SAMPLE_PATH, "--steps", "0", "--seed", "3", "--save", init});
  ASSERT_TRUE(made.ok()) << made.status() << "\n" << made.output;
  std::vector<std::string> ref{
      PYTHON3_PATH, TORCH_REFERENCE_PATH, "--world", "2", "--seed", "3", "--init", init, "--save",
      reference,    "--timeout",          "120"};
  for (auto& a : common_args()) ref.push_back(a);
  auto torch_run = run(ref);
  ASSERT_TRUE(torch_run.ok()) << torch_run.status() << "\n" << torch_run.output;

  // the strategy, then the sample's extra flags
  // (horovod multiplies the learning rate by the world size, which the sample applies: half of it
  // trains as DDP does)
  const std::vector<std::vector<std::string>> variants{
      {"ddp"},
      {"bagua"},
      {"bagua_gradient_allreduce"},
      // docs/bagua.md: average=false sums the gradients; at half the learning rate SGD with momentum
      // takes exactly DDP's steps at 2 ranks
      {"bagua", "--lr", "0.025", "--strategy-option", "average=false"},
      {"ddp_sharded"},
      {"horovod", "--lr", "0.025"}};
  for (const auto& v : variants) {
    const std::string tag = v[0] + (v.size() > 3 ? "_sum" : v.size() > 1 ? v[1] : "");
    SCOPED_TRACE(tag);
    const std::string out = dir / (tag + ".safetensors");
    std::vector<std::string> argv{
        PLRUN_PATH, "--accelerator",      "cpu",        "--strategy", v[0],     "--devices", "2",
        "--",       LIBTORCH_SAMPLE_PATH, "--seed",     "3",          "--init", init,        "--save",
        out,        "--report",           out + ".json"};
    for (auto& a : common_args()) argv.push_back(a);
    argv.insert(argv.end(), v.begin() + 1, v.end());
    auto r = run(argv);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    EXPECT_NE(r.output.find(v[0] + " x2, " + std::to_string(kSteps) + " steps"), std::string::npos) << r.output;
    EXPECT_GT(max_difference(out, init), 1e-2) << "training changed nothing";
    const double diff = max_difference(out, reference);
    EXPECT_LE(diff, 1e-5) << "plrt " << tag << " vs PyTorch DDP (gloo): largest weight difference";
    RecordProperty("max_abs_difference_" + tag, std::to_string(diff));
    // the hooks started the (one) bucket's allreduce during backward at every step
    std::ifstream in(out + ".json");
    ASSERT_TRUE(in) << "no report";
    const auto report = nlohmann::json::parse(in);
    if (v[0] == "horovod") {  // its fusion thread takes what the hooks mark ready: no bucket launches
      EXPECT_NE(r.output.find("learning rate 0.025 -> 0.05"), std::string::npos) << r.output;
      continue;
    }
    EXPECT_EQ(report["strategy_stats"].value("early_launches", -1.0), kSteps) << report.dump();
  }
}

}  // namespace
