// Several replicas per process and mixed precision, end to end through plrt-mlp on CPU "devices":
//  - dp on N devices = ddp on N ranks with the same global batch (one-phase and two-phase steps)
//  - dp's two-phase step with an uneven split = one process on the whole batch
//  - ddp2 on 2 nodes x 2 devices = one process on the union batch
//  - 32-true / bf16-mixed / 16-mixed converge, under single_device, ddp and dp
//  - the effective batch size is reported
#include <gmock/gmock.h>

#include "training_support.hpp"

namespace {

using namespace plrt_training;
using ::testing::HasSubstr;

std::vector<std::string> steps(int batch, int max_steps, const TempDir& dir, const std::string& save) {
  return {"--batch-size",   std::to_string(batch),
          "--max-steps",    std::to_string(max_steps),
          "--epochs",       "100",
          "--root-dir",     dir.path.string(),
          "--save",         dir / save,
          "--no-checkpoint"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

void dp_matches_ddp(int devices, bool whole_batch_loss) {
  TempDir dir;
  const int per_device = 8;
  auto ddp = run(plrun("ddp", devices, mlp_args(steps(per_device, 40, dir, "ddp.safetensors"))));
  EXPECT_RAN(ddp);
  auto args = with(
      steps(per_device * devices, 40, dir, "dp.safetensors"),
      {"--strategy", "dp", "--accelerator", "cpu", "--devices", std::to_string(devices), "--report", dir / "dp.json"});
  if (whole_batch_loss) args.push_back("--whole-batch-loss");
  auto dp = run(mlp_args(args));
  EXPECT_RAN(dp);
  EXPECT_LE(relative_difference(dir / "dp.safetensors", dir / "ddp.safetensors"), 1e-5)
      << "dp on " << devices << " devices drifted from ddp on " << devices << " ranks";
  auto rep = report(dir / "dp.json");
  EXPECT_EQ(rep.value("replicas", 0), devices);
  EXPECT_EQ(rep.value("effective_batch_size", 0), per_device * devices);
  // not vacuous: training moved the weights
  auto init =
      run(mlp_args(with(steps(8, 0, dir, "init.safetensors"), {"--strategy", "single_device", "--devices", "1"})));
  EXPECT_RAN(init);
  EXPECT_GT(relative_difference(dir / "init.safetensors", dir / "dp.safetensors"), 1e-2);
}

TEST(Replicas, DpTwoDevicesEqualsDdp) { dp_matches_ddp(2, false); }
TEST(Replicas, DpThreeDevicesEqualsDdp) { dp_matches_ddp(3, false); }
TEST(Replicas, DpWholeBatchLossEqualsDdp) { dp_matches_ddp(3, true); }

TEST(Replicas, DpUnevenSplitWithWholeBatchLossEqualsOneProcess) {
  // 10 rows over 3 devices: torch's scatter gives 4, 4, 2; the whole-batch loss weighs them exactly.
  TempDir dir;
  auto dp = run(mlp_args(with(steps(10, 30, dir, "dp.safetensors"),
                              {"--strategy", "dp", "--accelerator", "cpu", "--devices", "3", "--whole-batch-loss"})));
  EXPECT_RAN(dp);
  auto single =
      run(mlp_args(with(steps(10, 30, dir, "single.safetensors"), {"--strategy", "single_device", "--devices", "1"})));
  EXPECT_RAN(single);
  EXPECT_LE(relative_difference(dir / "dp.safetensors", dir / "single.safetensors"), 1e-5);
}

TEST(Replicas, SeveralNodesWithoutALauncherSayHowToLaunch) {
  auto r = run(mlp_args({"--strategy", "ddp2", "--accelerator", "cpu", "--devices", "2", "--num-nodes", "2"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("plrun --strategy ddp2 --num-nodes 2 --node-rank <n>")) << r.output;
}

TEST(Replicas, Ddp2TwoNodesEqualsUnionBatch) {
  TempDir dir;
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  auto node = [&](int rank) {
    plrt_test::ProcessSpec s;
    s.argv = {PLRUN_PATH,
              "--accelerator",
              "cpu",
              "--strategy",
              "ddp2",
              "--devices",
              "2",
              "--num-nodes",
              "2",
              "--node-rank",
              std::to_string(rank),
              "--master-addr",
              "127.0.0.1",
              "--master-port",
              port,
              "--"};
    auto prog = mlp_args(with(steps(8, 40, dir, "ddp2.safetensors"), {"--report", dir / "ddp2.json"}));
    s.argv.insert(s.argv.end(), prog.begin(), prog.end());
    s.env = {{"PL_JOB_TOKEN", "ddp2-test"}, {"PL_LOG_LEVEL", "warn"}};
    s.unset_env = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PL_USE_AGENT_STORE"};
    s.label = "node " + std::to_string(rank);
    return s;
  };
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(120);
  auto job = plrt_test::run_job({node(0), node(1)}, w);
  ASSERT_TRUE(job.all_ok()) << job.report();
  // each node's batch of 8 is split over its 2 devices; the two nodes together take 16 per step
  auto single =
      run(mlp_args(with(steps(16, 40, dir, "single.safetensors"), {"--strategy", "single_device", "--devices", "1"})));
  EXPECT_RAN(single);
  EXPECT_LE(relative_difference(dir / "ddp2.safetensors", dir / "single.safetensors"), 1e-5);
  auto rep = report(dir / "ddp2.json");
  EXPECT_EQ(rep.value("replicas", 0), 2);
  EXPECT_EQ(rep.value("world_size", 0), 2);
  EXPECT_EQ(rep.value("effective_batch_size", 0), 16);
}

// The sample reaches high held-out accuracy in every precision; mixed runs really compute in low
// precision (their weights differ from 32-true's), and stay close to it.
void converges(const std::string& precision, const std::vector<std::string>& launch) {
  TempDir dir;
  auto args = with({"--batch-size", "32", "--epochs", "3", "--root-dir", dir.path.string(), "--no-checkpoint", "--save",
                    dir / "w.safetensors", "--report", dir / "r.json", "--precision", precision},
                   {});
  std::vector<std::string> argv;
  if (!launch.empty() && launch[0] == "ddp")
    argv = plrun("ddp", 2, mlp_args(args));
  else
    argv = mlp_args(with(args, launch));
  auto r = run(argv);
  EXPECT_RAN(r);
  auto rep = report(dir / "r.json");
  EXPECT_EQ(rep.value("precision", ""), precision);
  const double acc = rep["metrics"].value("val_acc", 0.0);
  EXPECT_GE(acc, 0.9) << precision << " did not converge:\n" << r.output;
  if (precision == "16-mixed") {
    EXPECT_GT(rep.value("loss_scale", 0.0), 0.0);
    EXPECT_LE(rep.value("loss_scale", 0.0), 65536.0);
  }
}

TEST(Precision, Bf16MixedConvergesOnOneDevice) {
  converges("bf16-mixed", {"--strategy", "single_device", "--devices", "1"});
}
TEST(Precision, Fp16MixedConvergesOnOneDevice) {
  converges("16-mixed", {"--strategy", "single_device", "--devices", "1"});
}
TEST(Precision, Fp16MixedConvergesUnderDdp) { converges("16-mixed", {"ddp"}); }
TEST(Precision, Fp16MixedConvergesUnderDp) {
  converges("16-mixed", {"--strategy", "dp", "--accelerator", "cpu", "--devices", "2"});
}
TEST(Precision, Bf16MixedConvergesUnderDp) {
  converges("bf16-mixed", {"--strategy", "dp", "--accelerator", "cpu", "--devices", "2"});
}

TEST(Precision, MixedRunsComputeInLowPrecision) {
  // A few steps: close to float32's weights (training has not yet amplified rounding), yet not
  // equal to them.  (16-mixed may skip its first steps while the loss scale backs off from 2^16,
  // so only "not equal" holds for it.)
  TempDir dir;
  auto base = with(steps(16, 3, dir, "f32.safetensors"), {"--strategy", "single_device", "--devices", "1"});
  EXPECT_RAN(run(mlp_args(base)));
  for (const char* p : {"bf16-mixed", "16-mixed"}) {
    auto a = with(steps(16, 3, dir, std::string(p) + ".safetensors"),
                  {"--strategy", "single_device", "--devices", "1", "--precision", p, "--report", dir / "r.json"});
    EXPECT_RAN(run(mlp_args(a)));
    const double rel = relative_difference(dir / (std::string(p) + ".safetensors"), dir / "f32.safetensors");
    EXPECT_GT(rel, 1e-7) << p << " gave float32's weights: it did not compute in low precision";
    if (std::string(p) == "bf16-mixed") {
      EXPECT_LT(rel, 1e-2) << p << " drifted far from float32 in 3 steps";
    }
    EXPECT_EQ(report(dir / "r.json").value("skipped_steps", -1) >= 0, true);
  }
}

TEST(Training, EffectiveBatchSizeIsReported) {
  TempDir dir;
  auto spec = plrun("ddp", 2, mlp_args(with(steps(8, 2, dir, "w.safetensors"), {"--accumulate-grad-batches", "2"})));
  plrt_test::ProcessSpec s;
  s.argv = spec;
  s.env = {{"PL_LOG_LEVEL", "info"}};
  s.unset_env = {"RANK",        "WORLD_SIZE",   "LOCAL_RANK",        "MASTER_ADDR",
                 "MASTER_PORT", "PL_JOB_TOKEN", "PL_USE_AGENT_STORE"};
  auto r = plrt_test::run_job({s}).processes.at(0);
  EXPECT_RAN(r);
  EXPECT_THAT(r.output,
              HasSubstr("effective batch size 16 (8 per device x 2 device(s) x 1 node(s)), 32 per optimizer step"));
}

}  // namespace
