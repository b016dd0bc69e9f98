// Preemption under plrun (issue 15): SLURM and Kubernetes send SIGTERM before they kill a job.
// Under plrun the trainer's checkpoint_on_sigterm is on by default, so
//  - a SIGTERM to plrun (passed on to the workers) mid-epoch: every rank finishes its step, the
//    ranks agree, checkpoints/last is written mid-epoch, plrun exits 143 within its grace period,
//    and `plrt-mlp --resume last` under plrun ends with the uninterrupted run's weights;
//  - a SIGTERM to the workers only (an eviction): they checkpoint and exit 143, plrun
//    --max-restarts counts a restart, and the new workers resume from that checkpoint and end with
//    the uninterrupted run's weights.
#include <signal.h>

#include <fstream>
#include <thread>

#include "proc_table.hpp"
#include "training_support.hpp"

namespace {

using namespace plrt_training;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// 2100 training samples in batches of 2 on 2 ranks: 525 steps an epoch, 2 epochs; a checkpoint
// every 10 steps tells the test that training has begun.
std::vector<std::string> job(const TempDir& dir, const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--batch-size", "2",          "--epochs", "2", "--checkpoint-every-steps",
                             "10",           "--root-dir", dir / name};
  a.insert(a.end(), extra.begin(), extra.end());
  return plrun("ddp", 2, mlp_args(a));
}

// plrun's workers (plrt-mlp) under its pid.
std::vector<pid_t> workers_under(pid_t root) { return plrt_test::running_under(root, MLP_PATH); }

plrt_test::ProcessSpec spec_of(std::vector<std::string> argv) {
  plrt_test::ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.env = {{"PL_LOG_LEVEL", "warn"}};  // no PL_TRAINER_CHECKPOINT_ON_SIGTERM: plrun's default
  spec.unset_env = {
      "RANK",         "WORLD_SIZE",         "LOCAL_RANK",   "MASTER_ADDR",  "MASTER_PORT",
      "PL_JOB_TOKEN", "PL_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS", "PL_TRAINER_CHECKPOINT_ON_SIGTERM"};
  return spec;
}

bool wait_for_file(const std::string& path, std::chrono::seconds timeout) {
  const auto give_up = Clock::now() + timeout;
  while (!fs::exists(path) && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(5));
  return fs::exists(path);
}

nlohmann::json trainer_json(const std::string& ckpt) {
  std::ifstream in(ckpt + "/trainer.json");
  return nlohmann::json::parse(in);
}

TEST(Preempt, SigtermToPlrunMidEpochCheckpointsAndResumeEqualsUninterruptedRun) {
  TempDir dir;
  auto full = run(job(dir, "full", {"--save", dir / "full.safetensors"}));
  EXPECT_RAN(full);

  const std::string ckpt = dir / "part/lightning_logs/version_0/checkpoints/last";
  plrt_test::Job part({spec_of(job(dir, "part"))});
  ASSERT_TRUE(wait_for_file(ckpt + "/trainer.json", std::chrono::seconds(60))) << "no checkpoint within 60 s";
  const auto signalled = Clock::now();
  ASSERT_EQ(::kill(part.pid(0), SIGTERM), 0);  // plrun itself, as SLURM's or the kubelet's signal
  auto stopped = part.wait().processes.at(0);
  const auto stop_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - signalled).count();
  std::cout << "[ preempt  ] plrun ended " << stop_ms << " ms after its SIGTERM" << std::endl;
  ASSERT_TRUE(stopped.exited) << stopped.status() << "\n" << stopped.output;
  EXPECT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.output;
  // Within the grace period (3 s): every worker ended by itself, none was SIGKILLed.
  EXPECT_EQ(stopped.output.find("sending SIGKILL"), std::string::npos) << stopped.output;
  const size_t at_msg = stopped.output.find("every rank stopped after step ");
  ASSERT_NE(at_msg, std::string::npos) << stopped.output;

  const auto saved = trainer_json(ckpt);
  const int64_t at = saved.at("global_step").get<int64_t>();
  // The checkpoint is the one written at the stop (not the cadence's), in the middle of epoch 0.
  EXPECT_NE(stopped.output.find("stopped after step " + std::to_string(at) + ";"), std::string::npos) << at << "\n"
                                                                                                      << stopped.output;
  EXPECT_EQ(saved.at("epoch").get<int64_t>(), 0);
  EXPECT_GT(saved.at("batches_done").get<int64_t>(), 0);
  EXPECT_LT(saved.at("batches_done").get<int64_t>(), 525);

  auto rest = run(job(dir, "part", {"--resume", "last", "--save", dir / "resumed.safetensors"}));
  EXPECT_RAN(rest);
  EXPECT_LE(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 1e-6);
}

TEST(Preempt, SigtermToTheWorkersCheckpointsAndPlrunRestartsThemFromIt) {
  TempDir dir;
  auto full = run(job(dir, "full", {"--save", dir / "full.safetensors"}));
  EXPECT_RAN(full);

  const std::string ckpt = dir / "part/lightning_logs/version_0/checkpoints/last";
  auto argv = job(dir, "part", {"--save", dir / "part.safetensors", "--report", dir / "report.json"});
  argv.insert(argv.begin() + 1, {"--max-restarts", "2"});
  plrt_test::Job part({spec_of(argv)});
  ASSERT_TRUE(wait_for_file(ckpt + "/trainer.json", std::chrono::seconds(60))) << "no checkpoint within 60 s";
  const auto workers = workers_under(part.pid(0));
  ASSERT_EQ(workers.size(), 2u) << "plrun's workers are not both running";
  for (pid_t w : workers) EXPECT_EQ(::kill(w, SIGTERM), 0) << w;  // an eviction: the workers, not plrun

  plrt_test::WaitOptions wo;
  wo.deadline = std::chrono::seconds(120);
  auto r = part.wait(wo).processes.at(0);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  EXPECT_NE(r.output.find("every rank stopped after step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 143"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; restart 1 of 2 (round 1)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restart 2 of 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("sending SIGKILL"), std::string::npos) << r.output;
  const auto rep = report(dir / "report.json");
  EXPECT_EQ(rep.value("restart_count", -1), 1) << rep.dump();
  EXPECT_EQ(rep.value("resumed_from", std::string()), ckpt) << rep.dump();
  EXPECT_LE(relative_difference(dir / "part.safetensors", dir / "full.safetensors"), 1e-6);
}

}  // namespace
