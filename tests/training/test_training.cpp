// Training end to end through the programs a user runs: plrun launching plrt-mlp.
//  - ddp at 2 and 3 ranks = one process on the union of the ranks' batches (SGD and Adam)
//  - ddp_spawn: the parent's module holds those weights
//  - gradient accumulation = a larger batch
//  - resume from a checkpoint = a run that never stopped
//  - sync_dist with unequal data per rank gives the true mean, sum, min, max
//  - SIGTERM (preemption) writes a checkpoint that resumes to the uninterrupted run
#include <csignal>
#include <fstream>
#include <thread>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

void ddp_matches_union(int world, const std::string& optimizer) {
  TempDir dir;
  const int per_rank = 8;
  auto ddp =
      run(plrun("ddp", world,
                mlp_args({"--optimizer", optimizer, "--batch-size", std::to_string(per_rank), "--max-steps", "50",
                          "--epochs", "100", "--root-dir", dir.path.string(), "--save", dir / "ddp.safetensors"})));
  EXPECT_RAN(ddp);
  auto single = run(mlp_args({"--optimizer", optimizer, "--strategy", "single_device", "--devices", "1", "--batch-size",
                              std::to_string(per_rank * world), "--max-steps", "50", "--epochs", "100", "--root-dir",
                              dir.path.string(), "--save", dir / "single.safetensors"}));
  EXPECT_RAN(single);
  double rel = relative_difference(dir / "ddp.safetensors", dir / "single.safetensors");
  EXPECT_LE(rel, 1e-5) << "ddp at " << world << " ranks drifted from one process on the union batch";
  // The initial weights differ from the trained ones: the comparison is not vacuous.
  auto init = run(mlp_args({"--strategy", "single_device", "--devices", "1", "--max-steps", "0", "--root-dir",
                            dir.path.string(), "--save", dir / "init.safetensors"}));
  EXPECT_RAN(init);
  EXPECT_GT(relative_difference(dir / "init.safetensors", dir / "single.safetensors"), 1e-2);
}

TEST(Training, DdpTwoRanksSgdEqualsUnionBatch) { ddp_matches_union(2, "sgd"); }
TEST(Training, DdpThreeRanksSgdEqualsUnionBatch) { ddp_matches_union(3, "sgd"); }
TEST(Training, DdpTwoRanksAdamEqualsUnionBatch) { ddp_matches_union(2, "adam"); }
TEST(Training, DdpThreeRanksAdamEqualsUnionBatch) { ddp_matches_union(3, "adam"); }

TEST(Training, DdpSpawnParentHoldsTheTrainedWeights) {
  TempDir dir;
  auto spawn = run(
      mlp_args({"--strategy", "ddp_spawn", "--accelerator", "cpu", "--devices", "2", "--batch-size", "8", "--max-steps",
                "40", "--epochs", "100", "--root-dir", dir.path.string(), "--save", dir / "spawn.safetensors"}));
  EXPECT_RAN(spawn);
  EXPECT_NE(spawn.output.find("plrt-mlp: 40 steps in"), std::string::npos) << spawn.output;  // the parent reports
  auto single =
      run(mlp_args({"--strategy", "single_device", "--devices", "1", "--batch-size", "16", "--max-steps", "40",
                    "--epochs", "100", "--root-dir", dir.path.string(), "--save", dir / "single.safetensors"}));
  EXPECT_RAN(single);
  EXPECT_LE(relative_difference(dir / "spawn.safetensors", dir / "single.safetensors"), 1e-5);
}

TEST(Training, GradientAccumulationEqualsLargerBatch) {
  TempDir dir;
  auto acc = run(mlp_args({"--strategy", "single_device", "--devices", "1", "--batch-size", "8",
                           "--accumulate-grad-batches", "3", "--max-steps", "30", "--epochs", "100", "--root-dir",
                           dir.path.string(), "--save", dir / "acc.safetensors"}));
  EXPECT_RAN(acc);
  auto big = run(mlp_args({"--strategy", "single_device", "--devices", "1", "--batch-size", "24", "--max-steps", "30",
                           "--epochs", "100", "--root-dir", dir.path.string(), "--save", dir / "big.safetensors"}));
  EXPECT_RAN(big);
  EXPECT_LE(relative_difference(dir / "acc.safetensors", dir / "big.safetensors"), 1e-5);
  // ... and under ddp, where the accumulating steps skip the allreduce (no_sync).
  auto ddp = run(plrun("ddp", 2,
                       mlp_args({"--batch-size", "4", "--accumulate-grad-batches", "3", "--max-steps", "30", "--epochs",
                                 "100", "--root-dir", dir.path.string(), "--save", dir / "ddp_acc.safetensors"})));
  EXPECT_RAN(ddp);
  EXPECT_LE(relative_difference(dir / "ddp_acc.safetensors", dir / "big.safetensors"), 1e-5);
}

void resume_matches(const std::vector<std::string>& launcher_prefix, int world) {
  TempDir dir;
  auto with = [&](std::vector<std::string> args) {
    if (launcher_prefix.empty()) {
      args.insert(args.end(), {"--strategy", "single_device", "--devices", "1"});
      return mlp_args(args);
    }
    return plrun(launcher_prefix[0], world, mlp_args(args));
  };
  // 2400 samples, 12.5% held out, 2100 / (16 x world) batches per epoch: 70 steps cross an epoch.
  const std::string bs = std::to_string(16 / world);
  auto full = run(with({"--batch-size", bs, "--max-steps", "70", "--epochs", "100", "--root-dir", dir / "full",
                        "--save", dir / "full.safetensors", "--optimizer", "adam"}));
  EXPECT_RAN(full);
  auto first = run(with(
      {"--batch-size", bs, "--max-steps", "45", "--epochs", "100", "--root-dir", dir / "part", "--optimizer", "adam"}));
  EXPECT_RAN(first);
  std::string ckpt = dir / "part/lightning_logs/version_0/checkpoints/last";
  ASSERT_TRUE(fs::exists(ckpt + "/model.safetensors")) << first.output;
  // The checkpoint's weights load as safetensors with PyTorch names.
  auto saved = pl::safetensors::load(ckpt + "/model.safetensors");
  EXPECT_TRUE(saved.tensors.count("layers.0.weight"));
  auto rest = run(with({"--batch-size", bs, "--max-steps", "70", "--epochs", "100", "--root-dir", dir / "part",
                        "--resume", ckpt, "--save", dir / "resumed.safetensors", "--optimizer", "adam"}));
  EXPECT_RAN(rest);
  EXPECT_LE(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 1e-6);
}

TEST(Training, ResumeEqualsUninterruptedRun) { resume_matches({}, 1); }
TEST(Training, DdpResumeEqualsUninterruptedRun) { resume_matches({"ddp"}, 2); }
// horovod scales the learning rate when the run starts; the resumed run keeps the checkpoint's.
TEST(Training, HorovodResumeEqualsUninterruptedRun) { resume_matches({"horovod"}, 2); }

// Preemption (SLURM's SIGTERM before the time limit): every rank stops after the same step, the
// checkpoint is written, the job exits 128 + SIGTERM, and resuming from it ends where a run that
// was never stopped ends.
TEST(Training, SigtermWritesACheckpointThatResumesToTheUninterruptedRun) {
  TempDir dir;
  const std::vector<std::string> common{"--batch-size", "8", "--epochs", "100", "--max-steps", "1500"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return plrun("ddp", 2, mlp_args(extra));
  };
  auto full = run(with({"--root-dir", dir / "full", "--save", dir / "full.safetensors"}));
  EXPECT_RAN(full);

  plrt_test::ProcessSpec spec;
  spec.argv = with({"--root-dir", dir / "part"});
  spec.env = {{"PL_TRAINER_CHECKPOINT_ON_SIGTERM", "1"}, {"PL_LOG_LEVEL", "warn"}};
  plrt_test::Job job({spec});
  // After the first epoch's checkpoint (131 steps) and well before the end, SLURM's signal comes.
  const std::string ckpt = dir / "part/lightning_logs/version_0/checkpoints/last";
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(ckpt + "/trainer.json") && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  job.signal(SIGTERM);
  auto stopped = job.wait().processes.at(0);
  ASSERT_TRUE(stopped.exited) << stopped.status() << "\n" << stopped.output;
  EXPECT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.output;
  EXPECT_NE(stopped.output.find("every rank stopped after step"), std::string::npos) << stopped.output;
  std::ifstream in(ckpt + "/trainer.json");
  auto saved = nlohmann::json::parse(in);
  const int64_t at = saved.at("global_step").get<int64_t>();
  EXPECT_GT(at, 0);
  EXPECT_LT(at, 1500) << "the signal came before the end: the run stopped early";
  // The checkpoint is the one written at the stop, not the last epoch's.
  EXPECT_NE(stopped.output.find("stopped after step " + std::to_string(at) + ";"), std::string::npos) << at << "\n"
                                                                                                      << stopped.output;

  auto rest = run(with({"--root-dir", dir / "part", "--resume", ckpt, "--save", dir / "resumed.safetensors"}));
  EXPECT_RAN(rest);
  EXPECT_LE(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 1e-6);
}

TEST(Training, SyncDistWithUnequalBatchesGivesTrueValues) {
  for (int world : {2, 3}) {
    TempDir dir;
    auto r = run(plrun("ddp", world, {METRICS_WORKER_PATH, dir / "metrics.json", dir.path.string()}));
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    std::ifstream in(dir / "metrics.json");
    auto m = nlohmann::json::parse(in);
    // rank r holds rows r*100 + i for i < 3 + 4r, in batches of 4
    double total = 0, count = 0, sum_of_means = 0, mn = 1e300, mx = -1e300, rank0_mean = 0, rank0_w = 0;
    int64_t correct = 0, step_correct = 0, step_count = 0;  // step_*: the ranks other than 1
    for (int rank = 0; rank < world; ++rank) {
      int n = 3 + 4 * rank;
      for (int b = 0; b * 4 < n; ++b) {
        double s = 0;
        int k = 0;
        for (int i = b * 4; i < std::min(n, b * 4 + 4); ++i, ++k) {
          double v = rank * 100.0 + i;
          s += v, mn = std::min(mn, v), mx = std::max(mx, v);
        }
        total += s, count += k, sum_of_means += s / k;
        for (int i = b * 4; i < std::min(n, b * 4 + 4); ++i) {
          const auto id = static_cast<int64_t>(rank * 100 + i);
          correct += id % 3 == id % 2;
          if (rank != 1) step_correct += id % 3 == id % 2, ++step_count;
        }
        if (rank == 0) rank0_mean += s, rank0_w += k;
      }
    }
    EXPECT_DOUBLE_EQ(m.at("mean").get<double>(), total / count) << "world " << world;
    EXPECT_DOUBLE_EQ(m.at("sum_of_batch_means").get<double>(), sum_of_means);
    EXPECT_DOUBLE_EQ(m.at("min").get<double>(), mn);
    EXPECT_DOUBLE_EQ(m.at("max").get<double>(), mx);
    EXPECT_DOUBLE_EQ(m.at("unsynced_mean").get<double>(), rank0_mean / rank0_w);
    // log(name, Metric&) in on_validation_epoch_end: every rank's rows (pl::MeanMetric, pl::Accuracy)
    EXPECT_NEAR(m.at("metric_mean").get<double>(), total / count, 1e-12) << "world " << world;
    EXPECT_EQ(m.at("metric_accuracy").get<double>(), static_cast<double>(correct) / count) << "world " << world;
    // log(name, Metric&) from validation_step: computed over the epoch when it ends
    EXPECT_EQ(m.at("step_accuracy").get<double>(), static_cast<double>(step_correct) / static_cast<double>(step_count))
        << "world " << world;
  }
}

TEST(Training, DdpWithoutLauncherSaysHowToLaunch) {
  auto r = run(mlp_args({"--strategy", "ddp", "--accelerator", "cpu", "--devices", "2"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("plrun --strategy ddp --devices 2"), std::string::npos) << r.output;
}

TEST(Training, UnknownPrecisionIsNamedWithTheValidOnes) {
  auto r = run(mlp_args({"--strategy", "single_device", "--devices", "1"}), {{"PL_TRAINER_PRECISION", "8-mixed"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("8-mixed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16-mixed"), std::string::npos) << r.output;
}

}  // namespace
