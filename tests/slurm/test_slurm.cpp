// plrt under a real SLURM (issue 14): the same binaries, started by srun and sbatch on a one-node
// cluster this test binary runs itself (slurm_cluster.hpp; started once, before the first test).
//  - srun -n2 plrt-mlp --strategy ddp trains to the weights plrun's two-process ddp run gets, and
//    each task's pl::ClusterEnv reads its rank, world, node and the job's port from SLURM;
//  - sbatch --wait of a batch script with srun inside does the same;
//  - SIGTERM reaches every task of an srun step: from scancel --signal=TERM at once, and from
//    --signal=TERM@N before the job's time limit (the job then ends COMPLETED, not TIMEOUT);
//  - the Trainer's preemption, on by default under SLURM: scancel --signal=TERM on a training job
//    makes every rank stop after the same step and write checkpoints/last at that step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "slurm_cluster.hpp"
#include "training_support.hpp"

namespace {

using namespace plrt_slurm;
using namespace plrt_training;
using namespace std::chrono_literals;

constexpr int kSteps = 40;

SlurmCluster& cluster() {
  static SlurmCluster c;
  return c;
}

class SlurmEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    cluster().start();
    if (!cluster().skip_reason().empty()) {
      std::cout << "slurm cluster not available: " << cluster().skip_reason() << std::endl;  // CTest's skip regex
      GTEST_SKIP() << cluster().skip_reason();
    }
    ASSERT_TRUE(cluster().up()) << "the SLURM cluster did not start: " << cluster().error();
  }
  void TearDown() override {
    const std::string left = cluster().stop();
    EXPECT_EQ(left, "") << "the SLURM cluster left processes running";
  }
};

[[maybe_unused]] auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SlurmEnvironment);

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cluster().up()) GTEST_SKIP() << "no SLURM cluster";
  }
  SlurmCluster& c = cluster();
};

// plrt-mlp's flags for a two-process ddp run on the cpu, writing <tag>.safetensors and <tag>.json.
std::vector<std::string> train_args(const TempDir& dir, const std::string& tag) {
  return mlp_args({"--accelerator", "cpu", "--strategy", "ddp", "--devices", "2", "--batch-size", "8", "--max-steps",
                   std::to_string(kSteps), "--epochs", "100", "--no-checkpoint", "--root-dir", dir / tag, "--save",
                   dir / (tag + ".safetensors"), "--report", dir / (tag + ".json")});
}

// The same training under plrun: the reference the SLURM runs must equal.
void train_with_plrun(const TempDir& dir) {
  auto r = run(plrun("ddp", 2, train_args(dir, "plrun")));
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
}

// The run saved weights equal to plrun's, after kSteps steps in a world of 2.
void expect_trained_like_plrun(const TempDir& dir, const std::string& tag) {
  ASSERT_TRUE(std::filesystem::exists(dir / (tag + ".safetensors"))) << tag << " saved no weights";
  EXPECT_LE(relative_difference(dir / (tag + ".safetensors"), dir / "plrun.safetensors"), 1e-6);
  const auto rep = report(dir / (tag + ".json"));
  EXPECT_EQ(rep.value("world_size", 0), 2) << rep.dump();
  EXPECT_EQ(rep.value("steps", 0), kSteps) << rep.dump();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes an executable batch script running `srun_argv` under srun.
std::string batch_script(const TempDir& dir, const std::string& name, const std::vector<std::string>& srun_argv) {
  std::string line = "srun";
  for (const auto& a : srun_argv) line += " " + shell_quote(a);
  const std::string path = dir / name;
  std::ofstream(path) << "#!/bin/sh\n" << line << "\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// Polls (20 s at most) until both tasks' reports exist.
bool wait_for_task_reports(const TempDir& dir) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    if (std::filesystem::exists(dir / "task-0.json") && std::filesystem::exists(dir / "task-1.json")) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

std::vector<std::string> worker(const TempDir& dir, long sleep_ms) {
  return {SLURM_WORKER_PATH, "--out-dir", dir.path.string(), "--sleep-ms", std::to_string(sleep_ms)};
}

// `srun -N1 -n2 <flags>` running the worker on both tasks.
std::vector<std::string> srun_worker(const TempDir& dir, const std::vector<std::string>& flags, long sleep_ms) {
  std::vector<std::string> argv{"srun", "-N1", "-n2"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const auto w = worker(dir, sleep_ms);
  argv.insert(argv.end(), w.begin(), w.end());
  return argv;
}

TEST_F(Slurm, SrunDdpTrainsTheWeightsPlrunDoes) {
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(train_with_plrun(dir));
  std::vector<std::string> argv{"srun", "-N1", "-n2", "--kill-on-bad-exit=1", "-t", "2"};
  const auto program = train_args(dir, "srun");
  argv.insert(argv.end(), program.begin(), program.end());
  auto r = c.client(argv, 90s, {{"PL_LOG_LEVEL", "warn"}});
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output << "\n" << c.logs();
  expect_trained_like_plrun(dir, "srun");
}

// Each task's ClusterEnv, read from what srun set: its rank and local rank, a world of 2 on one
// node, rank 0's host (the node) and the port Lightning derives from the job id.
TEST_F(Slurm, EachTaskReadsItsPlaceAndTheJobsPortFromSlurm) {
  TempDir dir;
  auto r = c.client(srun_worker(dir, {"--kill-on-bad-exit=1", "-t", "1"}, 0), 60s);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output << "\n" << c.logs();
  for (int task : {0, 1}) {
    const auto j = nlohmann::json::parse(read_text(dir / ("task-" + std::to_string(task) + ".json")));
    SCOPED_TRACE(j.dump());
    ASSERT_FALSE(j.contains("error"));
    const long job_id = std::stol(j["env"]["SLURM_JOB_ID"].get<std::string>());
    EXPECT_GE(job_id, c.first_job_id());
    EXPECT_EQ(j["source"], "slurm");
    EXPECT_EQ(j["rank"], task);
    EXPECT_EQ(j["local_rank"], task);
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["local_world_size"], 2);
    EXPECT_EQ(j["node_rank"], 0);
    EXPECT_EQ(j["num_nodes"], 1);
    EXPECT_EQ(j["master_addr"], c.node());
    EXPECT_EQ(j["master_port"], slurm_master_port(job_id));
  }
}

TEST_F(Slurm, SbatchWaitRunsABatchScriptWithSrun) {
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(train_with_plrun(dir));
  std::vector<std::string> srun{"--kill-on-bad-exit=1"};
  const auto program = train_args(dir, "sbatch");
  srun.insert(srun.end(), program.begin(), program.end());
  const std::string script = batch_script(dir, "train.sh", srun);
  auto r = c.client({"sbatch", "--wait", "-N1", "-n2", "-t", "2", "-o", dir / "train.out", script}, 90s,
                    {{"PL_LOG_LEVEL", "warn"}});
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output << "\n" << read_text(dir / "train.out") << c.logs();
  expect_trained_like_plrun(dir, "sbatch");
}

// scancel --signal=TERM <job> signals every task of the job's steps at once (not the batch shell,
// which goes on and ends the job normally once srun returns).
TEST_F(Slurm, ScancelSignalTermReachesEveryTaskOfTheStep) {
  TempDir dir;
  const std::string script = batch_script(dir, "wait.sh", worker(dir, 40000));
  auto sub = c.client({"sbatch", "--parsable", "-N1", "-n2", "-t", "1", "-o", dir / "wait.out", script});
  ASSERT_TRUE(sub.ok()) << sub.status() << "\n" << sub.output;
  const std::string job = sub.output.substr(0, sub.output.find_first_of(";\n"));
  ASSERT_TRUE(wait_for_task_reports(dir)) << "the tasks did not start\n" << read_text(dir / "wait.out") << c.logs();

  auto cancel = c.client({"scancel", "--signal=TERM", job});
  ASSERT_TRUE(cancel.ok()) << cancel.status() << "\n" << cancel.output;
  EXPECT_EQ(c.wait_for_job(job, 20s), "COMPLETED") << read_text(dir / "wait.out") << c.logs();
  for (int task : {0, 1})
    EXPECT_TRUE(std::filesystem::exists(dir / ("task-" + std::to_string(task) + ".sigterm")))
        << "task " << task << " saw no SIGTERM\n"
        << read_text(dir / "wait.out");
}

// --signal=TERM@N (srun's, or sbatch's in a batch script; not B:TERM@N, which signals the batch
// shell only): SLURM sends SIGTERM to every task of the job's steps N seconds (or up to 30 s more:
// slurmctld looks every 30 s) before the time limit.  With a one-minute limit and N=27 it arrives
// 3 to 33 s after the start; the tasks leave on it, so srun returns 0 and the job ends COMPLETED,
// well before its limit (a job killed at its limit ends TIMEOUT).
TEST_F(Slurm, SignalOptionSendsTermToEveryTaskBeforeTheTimeLimit) {
  TempDir dir;
  auto r = c.client(srun_worker(dir, {"-t", "1", "--signal=TERM@27"}, 58000), 50s);
  EXPECT_TRUE(r.ok()) << r.status() << " (a time-out here: the tasks got no SIGTERM before the limit)\n"
                      << r.output << "\n"
                      << c.logs();
  for (int task : {0, 1})
    EXPECT_TRUE(std::filesystem::exists(dir / ("task-" + std::to_string(task) + ".sigterm")))
        << "task " << task << " saw no SIGTERM\n"
        << r.output;
  const auto j = nlohmann::json::parse(read_text(dir / "task-0.json"));
  // srun has returned, but slurmctld may still hold the job COMPLETING for a moment: wait for its end
  EXPECT_EQ(c.wait_for_job(j["env"]["SLURM_JOB_ID"].get<std::string>(), 20s), "COMPLETED") << c.logs();
}

// Lightning's SLURM behaviour: the signal SLURM sends before the time limit makes the Trainer write a
// checkpoint at the step every rank stopped after, and the tasks exit 128 + SIGTERM.
TEST_F(Slurm, SigtermFromSlurmMakesTheTrainerCheckpointAndStop) {
  TempDir dir;
  std::vector<std::string> srun{"--kill-on-bad-exit=1"};
  const auto program = mlp_args({"--accelerator", "cpu", "--strategy", "ddp", "--devices", "2", "--batch-size", "8",
                                 "--epochs", "1000", "--root-dir", dir / "root"});
  srun.insert(srun.end(), program.begin(), program.end());
  const std::string script = batch_script(dir, "long.sh", srun);
  auto sub = c.client({"sbatch", "--parsable", "-N1", "-n2", "-t", "2", "-o", dir / "long.out", script}, 30s,
                      {{"PL_LOG_LEVEL", "warn"}});
  ASSERT_TRUE(sub.ok()) << sub.status() << "\n" << sub.output;
  const std::string job = sub.output.substr(0, sub.output.find_first_of(";\n"));
  // Once the first epoch's checkpoint exists, training is under way on both ranks.
  const std::string ckpt = dir / "root/lightning_logs/version_0/checkpoints/last";
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!std::filesystem::exists(ckpt + "/trainer.json") && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(std::filesystem::exists(ckpt + "/trainer.json")) << read_text(dir / "long.out") << c.logs();

  auto cancel = c.client({"scancel", "--signal=TERM", job});
  ASSERT_TRUE(cancel.ok()) << cancel.status() << "\n" << cancel.output;
  const std::string state = c.wait_for_job(job, 30s);
  const std::string out = read_text(dir / "long.out");
  EXPECT_EQ(state, "FAILED") << "srun returns the tasks' 143, so the batch script fails\n" << out;
  const auto saved = nlohmann::json::parse(read_text(ckpt + "/trainer.json"));
  const int64_t step = saved.at("global_step").get<int64_t>();
  EXPECT_NE(out.find("every rank stopped after step " + std::to_string(step) + ";"), std::string::npos)
      << "the checkpoint is the one written at the stop (step " << step << ")\n"
      << out;
  EXPECT_NE(out.find("stopped by SIGTERM after " + std::to_string(step) + " steps"), std::string::npos) << out;
}

}  // namespace
