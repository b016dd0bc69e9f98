// Fault tolerance and elastic resume, through the programs a user runs (plrun, plrt-mlp) and
// elastic_worker (a rank that records which rows every step trained):
//  - a checkpoint written by the step cadence, the job killed (SIGKILL) after it, a restart
//    (plrun --max-restarts: PL_RESTART_COUNT=1, no --resume) ends where a run that never stopped ends
//  - the time cadence: rank 0's clock decides, every rank saves with it, the weights are unchanged
//  - ckpt_path "last" picks the highest global step and keeps logging into its version folder
//  - a resume at world size 2 from a checkpoint of 3 (and 3 from 2) trains every sample of the
//    epoch exactly once (the rows recorded, and samples_trained); padding is not counted
//  - leftovers of killed saves are removed when the next run starts, in every version folder; live
//    ones are kept; a restart before any checkpoint logs in its first round's version folder
//  - ddp_spawn's workers resume "last" too; an older checkpoint (no samples_done) resumes by batches
//  - bad values of the cadences, PL_RESTART_COUNT and --resume exit 2 naming the value
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

nlohmann::json trainer_json(const std::string& ckpt) {
  std::ifstream in(ckpt + "/trainer.json");
  return nlohmann::json::parse(in);
}

std::vector<std::string> versions(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(root) / "lightning_logs", ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A crash after a step-cadence checkpoint; the restarted job (PL_RESTART_COUNT=1 and no --resume,
// as plrun --max-restarts starts it) resumes from it mid-epoch and ends with the uninterrupted
// run's weights, in the same version folder.
TEST(ElasticResume, StepCadenceCheckpointThenRestartEqualsUninterruptedRun) {
  TempDir dir;
  // 2100 training samples in batches of 2 on 2 ranks: 525 steps an epoch (the kill comes well before).
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--batch-size", "2", "--epochs", "100", "--max-steps", "600", "--optimizer", "adam"};
    a.insert(a.end(), extra.begin(), extra.end());
    return plrun("ddp", 2, mlp_args(a));
  };
  auto full = run(with({"--root-dir", dir / "full", "--save", dir / "full.safetensors"}));
  EXPECT_RAN(full);

  plrt_test::ProcessSpec spec;
  spec.argv = with({"--root-dir", dir / "part", "--checkpoint-every-steps", "25"});
  spec.env = {{"PL_LOG_LEVEL", "warn"}};
  plrt_test::Job job({spec});
  const std::string ckpt = dir / "part/lightning_logs/version_0/checkpoints/last";
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(ckpt + "/trainer.json") && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  job.signal(SIGKILL);  // a crash: no SIGTERM handling, no final checkpoint
  auto killed = job.wait().processes.at(0);
  ASSERT_FALSE(killed.ok()) << "the run ended before the kill: " << killed.output;
  auto saved = trainer_json(ckpt);
  const int64_t at = saved.at("global_step").get<int64_t>();
  EXPECT_EQ(at % 25, 0) << "a cadence checkpoint, not an epoch's: " << saved.dump();
  EXPECT_GT(saved.at("samples_done").get<int64_t>(), 0) << "mid-epoch: " << saved.dump();
  EXPECT_EQ(saved.at("samples_trained").get<int64_t>(), at * 4) << saved.dump();

  // The restart as plrun makes it: round 0 fails at once (the crash above stands for it), round 1
  // gets PL_RESTART_COUNT=1 from plrun and resumes by itself.
  auto restart =
      with({"--root-dir", dir / "part", "--save", dir / "resumed.safetensors", "--report", dir / "report.json"});
  const auto program = std::find(restart.begin(), restart.end(), std::string("--")) + 1;
  restart.insert(program, {"/bin/sh", "-c", "[ \"$PL_RESTART_COUNT\" = 0 ] && exit 9; exec \"$@\"", "sh"});
  restart.insert(restart.begin() + 1, {"--max-restarts", "1"});
  auto rest = run(restart, {{"PL_LOG_LEVEL", "info"}});
  EXPECT_RAN(rest);
  EXPECT_NE(rest.output.find("restart 1 of 1 (round 1)"), std::string::npos) << rest.output;
  EXPECT_NE(rest.output.find("resumed from " + ckpt), std::string::npos) << rest.output;
  // Bit-identical: the same batches, RNG states and optimizer state as the run that never stopped.
  EXPECT_EQ(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 0.0);
  EXPECT_EQ(versions(dir / "part"), std::vector<std::string>{"version_0"}) << "the restart logs where the job did";
  auto r = report(dir / "report.json");
  EXPECT_EQ(r.at("samples_trained").get<int64_t>(), 2100 + (600 - 525) * 4);
  EXPECT_EQ(r.at("restart_count").get<int64_t>(), 1);
}

// checkpoint_every_seconds: rank 0's clock decides and every rank enters the save with it (a
// disagreement would deadlock the save's collective); saving changes nothing in the training.
TEST(ElasticResume, TimeCadenceSavesOnEveryRankTogether) {
  TempDir dir;
  const std::vector<std::string> common{"--batch-size", "8", "--epochs", "100", "--max-steps", "40"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return plrun("ddp", 2, mlp_args(extra));
  };
  auto plain = run(with({"--root-dir", dir / "plain", "--save", dir / "plain.safetensors"}));
  EXPECT_RAN(plain);
  auto timed = run(with({"--root-dir", dir / "timed", "--save", dir / "timed.safetensors", "--timeout", "60",
                         "--checkpoint-every-seconds", "0.001"}),
                   {{"PL_LOG_LEVEL", "debug"}});
  EXPECT_RAN(timed);
  // After steps 1..39 rank 0 finds a millisecond passed whenever the last save is that old (step
  // 40 is max_steps: fit's own save follows).
  EXPECT_GE(count_of(timed.output, "checkpoint saved:"), 3u) << timed.output.substr(0, 4000);
  EXPECT_EQ(relative_difference(dir / "timed.safetensors", dir / "plain.safetensors"), 0.0);
}

// "last": the highest global step wins, not the newest folder; the resumed run keeps logging in
// that version folder (metrics.csv keeps the rows before the checkpoint).  No checkpoint: from
// scratch, said in the log.
TEST(ElasticResume, ResumeLastPicksTheHighestStepAndContinuesItsFolder) {
  TempDir dir;
  auto mlp = [&](std::vector<std::string> extra, const std::string& root = "root") {
    std::vector<std::string> a{"--strategy", "single_device", "--devices", "1",          "--batch-size",
                               "16",         "--epochs",      "100",       "--root-dir", dir / root};
    a.insert(a.end(), extra.begin(), extra.end());
    return mlp_args(a);
  };
  auto none = run(mlp({"--max-steps", "5", "--resume", "last"}), {{"PL_LOG_LEVEL", "info"}});
  EXPECT_RAN(none);
  EXPECT_NE(none.output.find("no checkpoint under"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find("training from scratch"), std::string::npos) << none.output;
  for (const char* steps : {"160", "10"}) EXPECT_RAN(run(mlp({"--max-steps", steps})));  // version_1, version_2
  // version_0: 5 steps, version_1: 160 (an epoch is 132 steps: epoch 1), version_2: 10
  auto last = run(
      mlp({"--max-steps", "200", "--resume", "last", "--report", dir / "r.json", "--save", dir / "last.safetensors"}));
  EXPECT_RAN(last);
  auto r = report(dir / "r.json");
  EXPECT_EQ(r.at("resumed_from").get<std::string>(), dir / "root/lightning_logs/version_1/checkpoints/last");
  EXPECT_EQ(versions(dir / "root"), (std::vector<std::string>{"version_0", "version_1", "version_2"}));
  std::ifstream csv(dir / "root/lightning_logs/version_1/metrics.csv");
  std::string text((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
  EXPECT_GE(count_of(text, "\n0,"), 1u) << "epoch 0's rows survive the resume:\n" << text;
  EXPECT_GE(count_of(text, "\n1,"), 1u) << text;
  // ... and it is the run that trained 200 steps without stopping.
  auto straight = run(mlp({"--max-steps", "200", "--save", dir / "s.safetensors"}, "straight"));
  EXPECT_RAN(straight);
  EXPECT_LE(relative_difference(dir / "last.safetensors", dir / "s.safetensors"), 1e-6);
}

// ddp_spawn: the forked workers resolve "last" (a restart) and the parent's trainer reports what
// rank 0's worker trained.
TEST(ElasticResume, DdpSpawnRestartResumesLastAndReportsTheWorkersCounts) {
  TempDir dir;
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--strategy",   "ddp_spawn", "--accelerator", "cpu", "--devices", "2",
                               "--batch-size", "8",         "--epochs",      "100"};
    a.insert(a.end(), extra.begin(), extra.end());
    return mlp_args(a);
  };
  EXPECT_RAN(run(with({"--max-steps", "40", "--root-dir", dir / "full", "--save", dir / "full.safetensors"})));
  EXPECT_RAN(run(with({"--max-steps", "20", "--root-dir", dir / "part", "--checkpoint-every-steps", "7"})));
  auto rest = run(with({"--max-steps", "40", "--root-dir", dir / "part", "--report", dir / "r.json", "--save",
                        dir / "resumed.safetensors"}),
                  {{"PL_RESTART_COUNT", "2"}});
  EXPECT_RAN(rest);
  auto r = report(dir / "r.json");
  EXPECT_EQ(r.at("resumed_from").get<std::string>(), dir / "part/lightning_logs/version_0/checkpoints/last");
  EXPECT_EQ(r.at("samples_trained").get<int64_t>(), 40 * 16);
  EXPECT_EQ(r.at("restart_count").get<int64_t>(), 2);
  EXPECT_EQ(versions(dir / "part"), std::vector<std::string>{"version_0"});
  EXPECT_EQ(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 0.0);
}

// A checkpoint of an older plrt (batches_done but no samples_done / samples_trained) resumes at its
// world size's position: batches_done x batch x world size.
TEST(ElasticResume, OlderCheckpointWithoutSamplesDoneResumesByBatches) {
  TempDir dir;
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--batch-size", "8", "--epochs", "100", "--optimizer", "adam"};
    a.insert(a.end(), extra.begin(), extra.end());
    return plrun("ddp", 2, mlp_args(a));
  };
  EXPECT_RAN(run(with({"--max-steps", "70", "--root-dir", dir / "full", "--save", dir / "full.safetensors"})));
  EXPECT_RAN(run(with({"--max-steps", "45", "--root-dir", dir / "part"})));
  const std::string ckpt = dir / "part/lightning_logs/version_0/checkpoints/last";
  auto j = trainer_json(ckpt);
  EXPECT_EQ(j.at("batches_done").get<int64_t>(), 45);
  j.erase("samples_done");
  j.erase("samples_trained");
  j.erase("step_batch_size");
  std::ofstream(ckpt + "/trainer.json") << j.dump(2);
  EXPECT_RAN(run(with(
      {"--max-steps", "70", "--root-dir", dir / "part", "--resume", ckpt, "--save", dir / "resumed.safetensors"})));
  EXPECT_EQ(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 0.0);
}

// Every row each process trained, as (epoch, index) pairs, from elastic_worker's records.
std::multiset<std::pair<int64_t, int64_t>> fetched(const std::string& out) {
  std::multiset<std::pair<int64_t, int64_t>> all;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().filename().string().rfind("fetched.", 0) != 0) continue;
    std::ifstream in(e.path());
    int64_t epoch = 0, index = 0;
    while (in >> epoch >> index) all.insert({epoch, index});
  }
  return all;
}

// 60 rows in batches of 2, shuffled, 2 epochs: `steps` optimizer steps at world size `w1`, then
// the rest resumed ("last") at `w2`.  Returns the output of the second run.
std::string resume_elsewhere(int w1, int64_t steps, int w2, int64_t expect_duplicates) {
  TempDir dir;
  const std::string out = dir / "out", root = dir / "root";
  fs::create_directories(out);
  auto worker = [&](int64_t max_steps, const std::string& ckpt) {
    return std::vector<std::string>{ELASTIC_WORKER_PATH, out, root, "60", "2", "2", std::to_string(max_steps), ckpt};
  };
  auto first = run(plrun("ddp", w1, worker(steps, "-")));
  EXPECT_TRUE(first.ok()) << first.status() << "\n" << first.output;
  const auto ckpt = trainer_json(root + "/lightning_logs/version_0/checkpoints/last");
  EXPECT_EQ(ckpt.at("samples_done").get<int64_t>(), steps * 2 * w1) << ckpt.dump();
  EXPECT_EQ(ckpt.at("world_size").get<int>(), w1);
  auto second = run(plrun("ddp", w2, worker(-1, "last")));
  EXPECT_TRUE(second.ok()) << second.status() << "\n" << second.output;
  auto r = report(out + "/result.json");
  EXPECT_EQ(r.at("samples_trained").get<int64_t>(), 120) << "2 epochs of 60, padding not counted";
  EXPECT_EQ(r.at("epoch").get<int64_t>(), 2);
  EXPECT_EQ(r.at("resumed_from").get<std::string>(), root + "/lightning_logs/version_0/checkpoints/last");
  EXPECT_EQ(versions(root), std::vector<std::string>{"version_0"});
  auto rows = fetched(out);
  int64_t duplicates = 0;
  for (int64_t epoch : {0, 1})
    for (int64_t i = 0; i < 60; ++i) {
      const auto times = static_cast<int64_t>(rows.count({epoch, i}));
      EXPECT_GE(times, 1) << "epoch " << epoch << " skipped row " << i;
      EXPECT_LE(times, 2) << "epoch " << epoch << " row " << i;
      duplicates += times - 1;
    }
  EXPECT_EQ(duplicates, expect_duplicates) << w1 << " -> " << w2;
  EXPECT_EQ(rows.size(), static_cast<size_t>(120 + expect_duplicates));
  return second.output;
}

TEST(ElasticResume, WorldSizeThreeToTwoTrainsEverySampleOnce) {
  // 4 steps of 6 = 24 rows; 36 left over 2 ranks
  auto out = resume_elsewhere(3, 4, 2, 0);
  EXPECT_NE(out.find("saved by 3 process(es)) with 2: the samples per optimizer step change from 6 to 4"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("the learning rate stays the checkpoint's"), std::string::npos) << out;
}

TEST(ElasticResume, WorldSizeTwoToThreeTrainsEverySampleOnce) {
  resume_elsewhere(2, 3, 3, 0);  // 12 rows done, 48 left over 3 ranks
  resume_elsewhere(2, 4, 3, 1);  // 16 done, 44 left: 15 a rank, one padded duplicate (not counted)
}

// A save killed in flight leaves "<path>.tmp-<pid>" folders that no later save to the same path
// removes when the next run writes into a new folder; the next run removes the dead process's.
TEST(ElasticResume, LeftoversOfKilledSavesAreRemovedAtTheNextStart) {
  TempDir dir;
  auto mlp = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--strategy", "single_device", "--devices", "1",          "--batch-size",
                               "16",         "--epochs",      "100",       "--root-dir", dir / "root"};
    a.insert(a.end(), extra.begin(), extra.end());
    return mlp_args(a);
  };
  EXPECT_RAN(run(mlp({"--max-steps", "5"})));
  const fs::path v0 = dir / "root/lightning_logs/version_0";
  const std::string dead = std::to_string(dead_pid()), live = std::to_string(getpid());
  for (const std::string& name : {"last.tmp-" + dead, "last.tmp-" + live, "epoch3.tmp-" + dead}) {
    fs::create_directories(v0 / "checkpoints" / name);
    std::ofstream(v0 / "checkpoints" / name / "model.safetensors") << "partial";
  }
  std::ofstream(v0 / ("metrics.csv.tmp-" + dead + "-0")) << "partial";
  auto next = run(mlp({"--max-steps", "10", "--resume", "last"}), {{"PL_LOG_LEVEL", "info"}});
  EXPECT_RAN(next);
  EXPECT_FALSE(fs::exists(v0 / "checkpoints" / ("last.tmp-" + dead)));
  EXPECT_FALSE(fs::exists(v0 / "checkpoints" / ("epoch3.tmp-" + dead)));
  EXPECT_FALSE(fs::exists(v0 / ("metrics.csv.tmp-" + dead + "-0")));
  EXPECT_TRUE(fs::exists(v0 / "checkpoints" / ("last.tmp-" + live))) << "a live process's save is kept";
  EXPECT_NE(next.output.find("removed 2 leftover(s)"), std::string::npos) << next.output;
  EXPECT_NE(next.output.find("removed 1 leftover(s)"), std::string::npos) << next.output;
}

// A job killed before its first checkpoint (plrun restarts it with PL_RESTART_COUNT=1 and the same
// PL_JOB_TOKEN): the restart trains from scratch in the version folder its first round opened (not
// a new one), and the dead saves' leftovers go from every version folder of the root.  "last"
// with no checkpoint warns when it is the user's --resume, as Lightning does.
TEST(ElasticResume, RestartBeforeAnyCheckpointKeepsItsVersionFolderAndCleansEveryVersion) {
  TempDir dir;
  auto mlp = [&](std::vector<std::string> extra, const char* steps = "5", const char* root = "root") {
    std::vector<std::string> a{"--strategy", "single_device", "--devices", "1",          "--batch-size",
                               "16",         "--max-steps",   steps,       "--root-dir", dir / root};
    a.insert(a.end(), extra.begin(), extra.end());
    return mlp_args(a);
  };
  const plrt_test::EnvVars job_a{{"PL_JOB_TOKEN", "token-of-job-a"}}, job_b{{"PL_JOB_TOKEN", "token-of-job-b"}};
  EXPECT_RAN(run(mlp({"--no-checkpoint", "--log-every-n-steps", "1"}),
                 job_a));                            // version_0: job a, killed before a checkpoint
  EXPECT_RAN(run(mlp({"--no-checkpoint"}), job_b));  // version_1: another job
  const fs::path logs = dir / "root/lightning_logs";
  std::ifstream marker(logs / "version_0/.plrt-job");
  std::string key;
  EXPECT_TRUE(marker >> key && key.size() == 36 && key.find("token") == std::string::npos) << key;
  const std::string dead = std::to_string(dead_pid());
  for (const char* v : {"version_0", "version_1"}) {
    fs::create_directories(logs / v / "checkpoints" / ("last.tmp-" + dead));
    std::ofstream(logs / v / "checkpoints" / ("last.tmp-" + dead) / "model.safetensors") << "partial";
  }
  auto env = job_a;
  env.insert(env.end(), {{"PL_RESTART_COUNT", "1"}, {"PL_LOG_LEVEL", "info"}});
  auto restarted = run(mlp({"--log-every-n-steps", "1"}, "7"), env);
  EXPECT_RAN(restarted);
  EXPECT_EQ(versions(dir / "root"), (std::vector<std::string>{"version_0", "version_1"})) << restarted.output;
  EXPECT_NE(restarted.output.find("[info] ckpt_path \"last\": no checkpoint under"), std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("logging again in " + (logs / "version_0").string()), std::string::npos)
      << restarted.output;
  for (const char* v : {"version_0", "version_1"})
    EXPECT_FALSE(fs::exists(logs / v / "checkpoints" / ("last.tmp-" + dead))) << v << "\n" << restarted.output;
  EXPECT_TRUE(fs::exists(logs / "version_0/checkpoints/last")) << "the restart's checkpoint is in its own folder";
  std::ifstream csv(logs / "version_0/metrics.csv");
  std::string text((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
  EXPECT_EQ(count_of(text, "epoch,step,"), 1u) << text;
  EXPECT_EQ(count_of(text, "\n"), 9u) << "the header, the restart's 7 steps and its short epoch's row (max_steps ends "
                                         "it inside the epoch); the first round's rows are gone\n"
                                      << text;

  // The user's --resume last with nothing to resume: a warning.
  auto mine = run(mlp({"--resume", "last"}, "5", "empty"));
  EXPECT_RAN(mine);
  EXPECT_NE(mine.output.find("[warning] ckpt_path \"last\": no checkpoint under"), std::string::npos) << mine.output;
}

TEST(ElasticResume, BadValuesExitTwoNamingThem) {
  TempDir dir;
  auto mlp = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"--strategy", "single_device", "--devices", "1", "--max-steps",
                               "1",          "--root-dir",    dir / "root"};
    a.insert(a.end(), extra.begin(), extra.end());
    return mlp_args(a);
  };
  struct Case {
    std::vector<std::string> args;
    plrt_test::EnvVars env;
    std::string named;
  };
  const std::vector<Case> cases{
      {{"--checkpoint-every-steps", "-3"}, {}, "checkpoint_every_n_steps=-3"},
      {{"--checkpoint-every-seconds", "-1"}, {}, "checkpoint_every_seconds=-1"},
      {{"--checkpoint-every-seconds", "soon"}, {}, "'soon'"},
      {{"--checkpoint-every-seconds", "inf"}, {}, "checkpoint_every_seconds=inf"},
      {{"--no-checkpoint", "--checkpoint-every-steps", "5"}, {}, "enable_checkpointing is false"},
      {{}, {{"PL_TRAINER_CHECKPOINT_EVERY_N_STEPS", "-1"}}, "PL_TRAINER_CHECKPOINT_EVERY_N_STEPS='-1'"},
      {{}, {{"PL_TRAINER_CHECKPOINT_EVERY_SECONDS", "-2"}}, "PL_TRAINER_CHECKPOINT_EVERY_SECONDS='-2'"},
      {{}, {{"PL_TRAINER_CHECKPOINT_EVERY_SECONDS", "nan"}}, "PL_TRAINER_CHECKPOINT_EVERY_SECONDS='nan'"},
      {{}, {{"PL_RESTART_COUNT", "abc"}}, "PL_RESTART_COUNT='abc'"},
      {{}, {{"PL_RESTART_COUNT", "-1"}}, "PL_RESTART_COUNT='-1'"},
      {{}, {{"PL_RESTART_COUNT", "1.5"}}, "PL_RESTART_COUNT='1.5'"},
      {{"--resume", "LAST"}, {}, "ckpt_path 'LAST'"},
      {{"--resume", "latest"}, {}, "ckpt_path 'latest'"},
      {{"--resume", "last/"}, {}, "ckpt_path 'last/'"},
      {{"--resume", dir / "nowhere"}, {}, "ckpt_path '" + dir / "nowhere" + "'"},
  };
  for (const auto& c : cases) {
    auto r = run(mlp(c.args), c.env);
    EXPECT_EQ(r.exit_code, 2) << c.named << "\n" << r.output;
    EXPECT_NE(r.output.find(c.named), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "root/lightning_logs")) << "no work before the errors";
}

}  // namespace
