// plrt::torch's DistributedDataParallel (ddp_worker.cpp, a libtorch program) against PyTorch's own
// DDP (torch_ddp_reference.py: gloo, Python, nothing of plrt): the same initial weights (rank 0's,
// written by the worker alone; the other ranks start elsewhere), the same micro-batches, Adam, a
// BatchNorm's buffers, an unused branch, no_sync accumulation, gradients set to none; after 20 steps
// every parameter and buffer agrees to 1e-5.  Then each bad input: a clear message, exit 2, no hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <plrt/sdk/safetensors.hpp>
#include <string>
#include <vector>

#include "python_reference.hpp"

namespace {

namespace fs = std::filesystem;

using namespace plrt_libtorch_test;

// Parameters only (a rank's buffers are its own since the last broadcast, as in PyTorch).
double max_param_difference(const std::string& a_path, const std::string& b_path) {
  auto a = pl::safetensors::load(a_path).tensors;
  double worst = 0;
  for (auto& [name, tb] : pl::safetensors::load(b_path).tensors) {
    if (name.find("running_") != std::string::npos || name.find("num_batches") != std::string::npos) continue;
    auto va = a.at(name).to_vector<float>(), vb = tb.to_vector<float>();
    for (size_t i = 0; i < vb.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(va[i]) - vb[i]));
  }
  return worst;
}

class TorchDdp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = unavailable(); !why.empty()) GTEST_SKIP() << why;
    auto made = run({WORKER_PATH, "--steps", "0", "--save", dir / "init.safetensors"});
    ASSERT_TRUE(made.ok()) << made.status() << "\n" << made.output;
  }
  std::string reference(int world) {
    const std::string out = dir / ("ref" + std::to_string(world) + ".safetensors");
    auto r = run({PYTHON3_PATH, REFERENCE_PATH, "--world", std::to_string(world), "--init", dir / "init.safetensors",
                  "--save", out, "--save-all"});
    EXPECT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    return out;
  }
  std::vector<std::string> plrun(int world) const {
    return {PLRUN_PATH, "--accelerator", "cpu", "--strategy", "ddp", "--devices", std::to_string(world), "--"};
  }
  TempDir dir;
};

TEST_F(TorchDdp, EqualsPyTorchDdpAtTwoAndThreeRanks) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::string ref = reference(world);
    for (bool view : {false, true}) {
      if (view && world == 3) continue;
      SCOPED_TRACE(view ? "gradient_as_bucket_view" : "copies");
      const std::string out = dir / ("plrt" + std::to_string(world) + (view ? "v" : "") + ".safetensors");
      auto argv = plrun(world);
      const std::vector<std::string> worker{WORKER_PATH, "--init", dir / "init.safetensors",
                                            "--save",    out,      "--save-all"};
      argv.insert(argv.end(), worker.begin(), worker.end());
      if (view) argv.push_back("--gradient-as-bucket-view");
      auto r = run(argv);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
      // find_unused_parameters reports the unused branch at forward time, so the one bucket starts
      // during backward at every synchronised step (none while the branch held it back)
      EXPECT_NE(r.output.find("ddp_worker: ddp x" + std::to_string(world) + ", 20 steps, early_launches 20"),
                std::string::npos)
          << r.output;
      EXPECT_GT(max_difference(out, dir / "init.safetensors"), 1e-2) << "training changed nothing";
      const double diff = max_difference(out, ref);
      EXPECT_LE(diff, 1e-5) << "plrt::torch vs PyTorch DDP (gloo), parameters and buffers of rank 0";
      RecordProperty("max_abs_difference_w" + std::to_string(world) + (view ? "_view" : ""), std::to_string(diff));
      for (int r2 = 1; r2 < world; ++r2) {
        const std::string suffix = ".rank" + std::to_string(r2);
        EXPECT_EQ(max_param_difference(out + suffix, out + ".rank0"), 0.0)
            << "rank " << r2 << "'s parameters differ from rank 0's";
        // its buffers: rank 0's from the broadcast before the last step's first forward, then its own
        // updates (PyTorch's rule); a missing or an extra broadcast shows here
        EXPECT_LE(max_difference(out + suffix, ref + suffix), 1e-5) << "rank " << r2 << " vs PyTorch's rank " << r2;
      }
    }
  }
}

// ZeroRedundancyOptimizer<Adam> equals DDP + Adam (PyTorch's), under ddp (whole parameters
// partitioned, broadcast from their owners) and ddp_sharded (the strategy's element ranges,
// gradients reduce-scattered); each rank's state is within 1/W + the largest parameter's (the
// worker checks it and exits 1 otherwise).  Also ddp_sharded with torch's Adam through ddp.step.
// bagua's deterministic algorithms through the wrapper (--strategy bagua_<algorithm>, the optimizer
// stepped by ddp.step) against torch_ddp_reference.py's --algorithm, which writes each from
// docs/bagua.md's formulas with torch.distributed on a plain module: at 3 ranks (a ring whose two
// neighbours differ), every rank's parameters to 1e-5 (they agree bit for bit here).  No BatchNorm:
// the buffers are ddp's business, checked above.  Then async, whose rounds run on a thread of their
// own (no reference can replay them): it averaged at least once, and sync_weights made the ranks
// equal.
TEST_F(TorchDdp, BaguaAlgorithmsEqualTheirReferencesAtThreeRanks) {
  const int world = 3;
  auto made = run({WORKER_PATH, "--steps", "0", "--no-norm", "--save", dir / "init_nn.safetensors"});
  ASSERT_TRUE(made.ok()) << made.output;
  std::map<std::string, std::string> got;
  for (const std::string algorithm : {"decentralized", "low_precision_decentralized", "bytegrad"}) {
    SCOPED_TRACE(algorithm);
    const std::string ref = dir / ("ref_" + algorithm + ".safetensors"), out = dir / (algorithm + ".safetensors");
    auto r = run({PYTHON3_PATH, REFERENCE_PATH, "--world", std::to_string(world), "--init", dir / "init_nn.safetensors",
                  "--save", ref, "--save-all", "--no-norm", "--algorithm", algorithm});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    r = run({PLRUN_PATH, "--accelerator", "cpu", "--strategy", "bagua_" + algorithm, "--devices", std::to_string(world),
             "--", WORKER_PATH, "--init", dir / "init_nn.safetensors", "--no-norm", "--save", out, "--save-all"});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    EXPECT_GT(max_difference(out, dir / "init_nn.safetensors"), 1e-2) << "training changed nothing";
    for (int rank = 0; rank < world; ++rank) {
      const std::string suffix = ".rank" + std::to_string(rank);
      const double diff = max_difference(out + suffix, ref + suffix);
      EXPECT_LE(diff, 1e-5) << "rank " << rank << " vs the reference's";
      RecordProperty("max_abs_difference_" + algorithm + "_rank" + std::to_string(rank), std::to_string(diff));
    }
    // decentralized ranks keep their own weights; bytegrad's every rank decodes the same bytes
    const double spread = max_difference(out + ".rank1", out + ".rank0");
    if (algorithm == "bytegrad")
      EXPECT_EQ(spread, 0.0);
    else
      EXPECT_GT(spread, 1e-4) << "the ranks' weights should differ between exchanges";
    got[algorithm] = out;
  }
  // three algorithms, three results (a reference that ignored --algorithm would match all three)
  EXPECT_GT(max_difference(got["decentralized"], got["low_precision_decentralized"]), 1e-5);
  EXPECT_GT(max_difference(got["decentralized"], got["bytegrad"]), 1e-4);

  const std::string out = dir / "async.safetensors";
  auto r = run({PLRUN_PATH,
                "--accelerator",
                "cpu",
                "--strategy",
                "bagua_async",
                "--devices",
                "2",
                "--strategy-option",
                "sync_interval_ms=2",
                "--",
                WORKER_PATH,
                "--init",
                dir / "init_nn.safetensors",
                "--no-norm",
                "--steps",
                "40",
                "--save",
                out,
                "--save-all",
                "--stat",
                "async_rounds"});
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  const auto at = r.output.find("stat async_rounds ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GE(std::stod(r.output.substr(at + 18)), 1.0) << "async never averaged\n" << r.output;
  EXPECT_EQ(max_difference(out + ".rank1", out + ".rank0"), 0.0) << "sync_weights left the ranks apart";
  EXPECT_GT(max_difference(out, dir / "init_nn.safetensors"), 1e-2) << "training changed nothing";
}

TEST_F(TorchDdp, ZeroRedundancyAdamEqualsPyTorchDdpAdam) {
  struct Run {
    std::string strategy;
    int world;
    bool zero;
  };
  const std::vector<Run> runs{{"ddp", 2, true},
                              {"ddp", 3, true},
                              {"ddp_sharded", 2, true},
                              {"ddp_sharded", 3, true},
                              {"ddp_sharded", 2, false}};
  std::map<int, std::string> refs;
  for (const auto& run_ : runs) {
    const std::string tag = run_.strategy + "_w" + std::to_string(run_.world) + (run_.zero ? "_zero" : "");
    SCOPED_TRACE(tag);
    if (!refs.count(run_.world)) refs[run_.world] = reference(run_.world);
    const std::string out = dir / (tag + ".safetensors");
    std::vector<std::string> argv{PLRUN_PATH,
                                  "--accelerator",
                                  "cpu",
                                  "--strategy",
                                  run_.strategy,
                                  "--devices",
                                  std::to_string(run_.world),
                                  "--",
                                  WORKER_PATH,
                                  "--init",
                                  dir / "init.safetensors",
                                  "--save",
                                  out};
    if (run_.zero) argv.push_back("--zero");
    auto r = run(argv);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    if (run_.zero) {
      for (int rank = 0; rank < run_.world; ++rank) {
        EXPECT_NE(r.output.find("ddp_worker: rank " + std::to_string(rank) + " zero state"), std::string::npos)
            << r.output;
      }
      EXPECT_NE(r.output.find(run_.strategy == "ddp" ? "whole)" : "sharded)"), std::string::npos) << r.output;
    }
    const double diff = max_difference(out, refs[run_.world]);
    EXPECT_LE(diff, 1e-5) << "vs PyTorch DDP + Adam";
    RecordProperty("max_abs_difference_" + tag, std::to_string(diff));
  }
}

// Real data no one here wrote: scikit-learn's digits (scripts/get-digits), libtorch's
// DistributedRandomSampler, the CNN under ddp at 2 processes: held-out accuracy >= 0.95.
TEST_F(TorchDdp, DigitsUnderDdpReachNinetyFivePercent) {
  auto made = run({PYTHON3_PATH, GET_DIGITS_PATH, dir.path.string()});
  if (!made.ok() && made.output.find("sklearn") != std::string::npos) GTEST_SKIP() << made.output;
  ASSERT_TRUE(made.ok()) << made.status() << "\n" << made.output;
  auto argv = plrun(2);
  const std::vector<std::string> worker{
      WORKER_PATH, "--digits", dir / "digits.safetensors", "--epochs", "15", "--batch-size", "32", "--lr", "0.01"};
  argv.insert(argv.end(), worker.begin(), worker.end());
  auto r = run(argv);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  const auto at = r.output.find("held-out accuracy ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double accuracy = std::stod(r.output.substr(at + 18));
  RecordProperty("held_out_accuracy", std::to_string(accuracy));
  EXPECT_GE(accuracy, 0.95) << r.output;
}

// A checkpoint written at 3 ranks, resumed at 2, ends where the uninterrupted 2-rank run ends:
// ZeroRedundancyOptimizer<Adam> under ddp (each rank's whole parameters' state written, resharded on
// load) and under ddp_sharded (element ranges of the parameters, each new range assembled from the
// saved ones it overlaps), and plain Adam (rank 0's state).  The same 12 samples per micro-batch at
// any world size, no BatchNorm (its statistics are per rank).  A resume without the optimizer's
// state would differ by far more.
TEST_F(TorchDdp, CheckpointAtThreeRanksResumesAtTwo) {
  for (const std::string tag : {"zero", "zero-sharded", "adam"}) {
    SCOPED_TRACE(tag);
    const bool zero = tag != "adam";
    auto worker = [&](int world, std::vector<std::string> extra) {
      auto argv = plrun(world);
      if (tag == "zero-sharded") argv[4] = "ddp_sharded";  // plrun --strategy
      const std::vector<std::string> w{
          WORKER_PATH, "--init", dir / "init.safetensors", "--global-batch", "12", "--no-norm", "--steps", "20"};
      argv.insert(argv.end(), w.begin(), w.end());
      if (zero) argv.push_back("--zero");
      argv.insert(argv.end(), extra.begin(), extra.end());
      return run(argv);
    };
    auto init = run({WORKER_PATH, "--steps", "0", "--no-norm", "--save", dir / "init.safetensors"});
    ASSERT_TRUE(init.ok()) << init.output;
    const std::string whole = dir / (tag + "-whole.safetensors"), resumed = dir / (tag + "-resumed.safetensors");
    const std::string ckpt = dir / (tag + "-ckpt");
    auto r = worker(2, {"--save", whole});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    r = worker(3, {"--checkpoint", ckpt, "--stop-at", "10"});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    EXPECT_NE(r.output.find("ddp_worker: saved at step 10"), std::string::npos) << r.output;
    for (const char* f : {"info.json", "model.safetensors"}) EXPECT_TRUE(fs::exists(fs::path(ckpt) / f)) << f;
    if (zero) {
      for (int rank = 0; rank < 3; ++rank)
        EXPECT_TRUE(fs::exists(fs::path(ckpt) / ("optimizer.rank" + std::to_string(rank) + ".pt"))) << rank;
    } else {
      EXPECT_TRUE(fs::exists(fs::path(ckpt) / "optimizer.pt"));
    }
    r = worker(2, {"--checkpoint", ckpt, "--save", resumed});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    EXPECT_NE(r.output.find("ddp_worker: resumed at step 10 (saved by 3 ranks, tag 42.5)"), std::string::npos)
        << r.output;
    const double diff = max_difference(resumed, whole);
    EXPECT_LE(diff, 1e-5) << "resumed at 2 ranks from a 3-rank checkpoint vs the uninterrupted 2-rank run";
    RecordProperty("max_abs_difference_resume_" + tag, std::to_string(diff));
  }
}

// consolidate_state_dict(0) gathers every rank's partition into one Adam on rank 0, whose state
// equals plain Adam's after the same training (2 ranks: ZeRO's weights equal Adam's, so its state too).
TEST_F(TorchDdp, ZeroConsolidatedStateEqualsPlainAdams) {
  auto train = [&](bool zero, const std::string& optim) {
    auto argv = plrun(2);
    const std::vector<std::string> w{WORKER_PATH, "--init", dir / "init.safetensors", "--save-optim", optim};
    argv.insert(argv.end(), w.begin(), w.end());
    if (zero) argv.push_back("--zero");
    return run(argv);
  };
  const std::string plain = dir / "adam-state.safetensors", gathered = dir / "zero-state.safetensors";
  auto r = train(false, plain);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  r = train(true, gathered);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  // every trained parameter's two moments (conv, bn, fc: 5 parameters; the unused branch has none)
  EXPECT_EQ(pl::safetensors::load(gathered).tensors.size(), 10u);
  EXPECT_LE(max_difference(gathered, plain), 1e-5);
}

TEST_F(TorchDdp, CollectivesOnTensorsAtThreeRanks) {
  auto argv = plrun(3);
  argv.insert(argv.end(), {WORKER_PATH, "--collectives"});
  auto r = run(argv, 60);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  EXPECT_NE(r.output.find("ddp_worker: collectives ok at 3 ranks"), std::string::npos) << r.output;
}

TEST_F(TorchDdp, UnderTorchrunNoPython) {
  if (::access(TORCHRUN_PATH, X_OK) != 0) GTEST_SKIP() << "no torchrun (python3-torch)";
  const std::string ref = reference(2);
  const std::string out = dir / "torchrun.safetensors";
  // plrt serves its own store beside torchrun's agent store (MASTER_PORT + 1): two free ports
  // (Debian's torchrun 1.13 needs -r/-t with a --log_dir; each worker's output is in that folder)
  auto r = run({TORCHRUN_PATH, "--nproc_per_node", "2", "--no_python", "-r", "2", "-t", "2", "--log_dir",
                dir / "torchrun-logs", "--monitor_interval", "0.2", "--master_port",
                std::to_string(plrt_test::free_tcp_ports(2)), WORKER_PATH, "--init", dir / "init.safetensors", "--save",
                out});
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  EXPECT_LE(max_difference(out, ref), 1e-5);
}

TEST_F(TorchDdp, BadInputExitsTwoNamingIt) {
  struct Case {
    std::string bad, expect;
  };
  const std::vector<Case> cases{
      {"shape",
       "entry 4 is 'fc.weight' (trainable parameter, Float [11, 64]) here but 'fc.weight' (trainable parameter, Float "
       "[10, 64]) on rank 0"},
      {"count",
       "rank 1 registered other parameters than rank 0: entry 0 is 'extra' (trainable parameter, Float [3]) "
       "here but 'temperature' (frozen parameter, Float [1]) on rank 0"},
      {"collective-noncontiguous", "pl::torch::all_reduce: the tensor (shape [3, 4]) is not contiguous"},
      {"dtype", "'fc.weight' (trainable parameter, Double [10, 64]) here"},
      {"noncontiguous", "parameter 'fc.weight' (shape [10, 64]) is not contiguous"},
      {"device", "parameter 'elsewhere' is on meta but this process trains on cpu"},
      {"dp", "strategy 'dp' drives a copy of the module per device"},
      {"ddp2", "strategy 'ddp2' drives a copy of the module per device"},
      {"ddp_spawn", "strategy 'ddp_spawn' spawns its workers"},
      {"grad-shape", "parameter 'fc.weight' has a gradient of Float [3]"},
      {"nosync-other", "DistributedDataParallel #2: forward was called inside the no_sync() scope of another"},
      {"unused", "got no gradient in this backward ('unused.weight', 'unused.bias')"},
      {"outside-use", "parameter 'unused.weight' got a gradient through a path that does not pass through"},
  };
  auto expect_bad = [](const std::vector<std::string>& argv, const std::string& expect) {
    auto r = run(argv, 60);
    EXPECT_FALSE(r.timed_out) << r.output;
    EXPECT_TRUE(r.exited && r.exit_code == 2) << r.status() << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.bad);
    auto argv = plrun(2);
    argv.insert(argv.end(), {WORKER_PATH, "--bad", c.bad});
    if (c.bad == "dp" || c.bad == "ddp2" || c.bad == "ddp_spawn") argv = {WORKER_PATH, "--bad", c.bad};  // alone
    expect_bad(argv, c.expect);
  }
  {
    SCOPED_TRACE("ddp_sharded with optimizer.step() outside ddp.step()");
    expect_bad({PLRUN_PATH, "--accelerator", "cpu", "--strategy", "ddp_sharded", "--devices", "2", "--", WORKER_PATH,
                "--bad", "plain-step"},
               "strategy 'ddp_sharded' shards the gradients");
  }
  {
    SCOPED_TRACE("bagua_decentralized with optimizer.step() outside ddp.step(): its weight exchange would not run");
    expect_bad({PLRUN_PATH, "--accelerator", "cpu", "--strategy", "bagua_decentralized", "--devices", "2", "--",
                WORKER_PATH, "--bad", "plain-step"},
               "strategy 'bagua_decentralized' acts around the optimizer step");
  }
  // plrun's --strategy wins over the program's; dp, ddp2 and ddp_spawn are refused at init then
  for (const std::string s : {"dp", "ddp2", "ddp_spawn"}) {
    SCOPED_TRACE("plrun --strategy " + s);
    expect_bad(
        {PLRUN_PATH, "--accelerator", "cpu", "--strategy", s, "--devices", "2", "--", WORKER_PATH, "--steps", "1"},
        "pl::torch::init: strategy '" + s + "'");
  }
}

}  // namespace
