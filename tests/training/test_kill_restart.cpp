// Chaos under plrun --max-restarts: a random worker of a ddp job is killed (SIGKILL) at a random
// time, trial after trial.  Every job must finish, its restart must begin within 5 s of the death,
// no process of the job may be left, and the final weights must equal an uninterrupted run's
// (checkpoints every few steps; a restart resumes the last one) to 1e-6.
//
// 20 trials in CI, in 4 shards of 5 so that they spread over the cores.  PLRT_KILL_TRIALS=N runs N
// per shard instead (scripts/chaos-restarts runs 50 in all); PLRT_KILL_SEED picks another sequence.
#include <signal.h>

#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "proc_table.hpp"
#include "training_support.hpp"

namespace {

using namespace plrt_training;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kShards = 4;

// plrun's workers (plrt-mlp) under its pid.
std::vector<pid_t> workers_under(pid_t root) { return plrt_test::running_under(root, MLP_PATH); }

// Live processes with an argument that names `marker` (the trial's own folder).
std::vector<pid_t> left_with(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& p : plrt_test::proc_table())
    for (const auto& a : p.args)
      if (p.state != 'Z' && a.find(marker) != std::string::npos) {
        out.push_back(p.pid);
        break;
      }
  return out;
}

std::vector<std::string> job_args(const TempDir& dir, const std::string& name) {
  // 2 ranks x 150 steps of batch 4 (an epoch is 240 steps), Adam, a checkpoint every 5 steps.
  return plrun(
      "ddp", 2,
      mlp_args({"--batch-size", "4", "--epochs", "2", "--max-steps", "150", "--optimizer", "adam", "--root-dir",
                dir / name, "--save", dir / (name + ".safetensors"), "--checkpoint-every-steps", "5"}));
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

class KillRestart : public ::testing::TestWithParam<int> {};

TEST_P(KillRestart, ARandomWorkerKilledAtARandomTimeRestartsAndEndsWithTheUninterruptedWeights) {
  TempDir dir;
  const int trials = env_int("PLRT_KILL_TRIALS", 5);
  const int seed = env_int("PLRT_KILL_SEED", 2026) * kShards + GetParam();
  std::mt19937 rng(static_cast<uint32_t>(seed));

  // The uninterrupted run, and how long it takes (the kills fall inside that time).
  const auto full_start = Clock::now();
  auto full = run(job_args(dir, "full"));
  ASSERT_TRUE(full.ok()) << full.status() << "\n" << full.output;
  const auto full_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - full_start).count();

  for (int trial = 0; trial < trials; ++trial) {
    const std::string name = "trial" + std::to_string(trial);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", trial " + std::to_string(trial));
    plrt_test::ProcessSpec spec;
    spec.argv = job_args(dir, name);
    spec.argv.insert(spec.argv.begin() + 1, {"--max-restarts", "3", "--grace-period", "1"});
    spec.env = {{"PL_LOG_LEVEL", "warn"}};
    spec.unset_env = {"RANK",        "WORLD_SIZE",   "LOCAL_RANK",        "MASTER_ADDR",
                      "MASTER_PORT", "PL_JOB_TOKEN", "PL_USE_AGENT_STORE"};
    plrt_test::Job job({spec});
    const auto t0 = Clock::now();

    // Both workers up, then a random moment of the run, then one of them.
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    std::vector<pid_t> before;
    while ((before = workers_under(job.pid(0))).size() < 2 && Clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(5));
    ASSERT_EQ(before.size(), 2u) << "the workers did not start";
    std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<long>(0, full_ms * 7 / 10)(rng)));
    const pid_t victim = before[std::uniform_int_distribution<size_t>(0, 1)(rng)];
    const auto killed_at = Clock::now();
    const bool sent = ::kill(victim, SIGKILL) == 0;

    // The restart: two new workers, within 5 s.
    long restart_ms = -1;
    const auto until = killed_at + std::chrono::seconds(10);
    while (sent && restart_ms < 0 && Clock::now() < until) {
      int fresh = 0;
      for (pid_t p : workers_under(job.pid(0)))
        if (std::find(before.begin(), before.end(), p) == before.end()) ++fresh;
      if (fresh == 2) restart_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - killed_at).count();
      if (::kill(job.pid(0), 0) != 0) break;
      std::this_thread::sleep_for(milliseconds(5));
    }
    plrt_test::WaitOptions w;
    w.deadline = std::chrono::seconds(90);
    auto r = job.wait(w).processes.at(0);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    const bool restarted = r.output.find("; restart 1 of 3 (round 1)") != std::string::npos;
    std::cout << "[ trial    ] seed " << seed << " trial " << trial << ": pid " << victim << " killed after "
              << std::chrono::duration_cast<milliseconds>(killed_at - t0).count() << " ms"
              << (restarted ? ", new workers after " + std::to_string(restart_ms) + " ms" : ", no restart needed")
              << std::endl;
    if (sent && restarted) {
      EXPECT_GE(restart_ms, 0) << "no new workers within 10 s of the kill\n" << r.output;
      EXPECT_LT(restart_ms, 5000) << r.output;
    }
    // A kill that came as the job was ending (the worker had finished) needs no restart.
    EXPECT_TRUE(restarted || !sent || r.output.find("was killed by signal 9") == std::string::npos) << r.output;
    EXPECT_EQ(left_with(dir / name), std::vector<pid_t>{}) << "processes of the job are left";
    EXPECT_LE(relative_difference(dir / (name + ".safetensors"), dir / "full.safetensors"), 1e-6) << r.output;
    if (HasFatalFailure() || HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, KillRestart, ::testing::Range(0, kShards),
                         [](const auto& info) { return "shard" + std::to_string(info.param); });

}  // namespace
