// plrun launching jobs: what each worker gets (ranks, rendezvous, token, trainer flags) in each
// launch mode and on several nodes, and the store node 0's plrun serves.
#include <gmock/gmock.h>

#include "launcher_support.hpp"

using namespace launcher_test;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

namespace {

std::string env_of(const nlohmann::json& j, const std::string& name) {
  return j["env"].contains(name) ? j["env"][name].get<std::string>() : "<unset>";
}

// Whether `config` resolves with this build's plugins (strategies written elsewhere may be missing).
bool resolves(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {kPlrun, "--dry-run"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return run_plrun(argv).exit_code == 0;
}

}  // namespace

class LaunchEnv : public ::testing::TestWithParam<int> {};

TEST_P(LaunchEnv, EveryRankGetsItsPlaceAndTheSameRendezvous) {
  const int n = GetParam();
  ScratchDir dir;
  // An inherited rank or trainer flag must not leak into the job.
  auto p = run_plrun(ppd_job(n, {}, {"--out-dir", dir.str()}), {{"RANK", "7"},
                                                                {"PL_TRAINER_PRECISION", "16-mixed"},
                                                                {"PL_TRAINER_STRATEGY_OPTIONS", R"({"a":"1"})"},
                                                                {"PL_LAUNCH_MODE", "spawn"}});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  std::string port, token;
  for (int r = 0; r < n; ++r) {
    auto j = report(dir, "rank-" + std::to_string(r));
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(env_of(j, "RANK"), std::to_string(r));
    EXPECT_EQ(env_of(j, "LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(env_of(j, "WORLD_SIZE"), std::to_string(n));
    EXPECT_EQ(env_of(j, "LOCAL_WORLD_SIZE"), std::to_string(n));
    EXPECT_EQ(env_of(j, "NODE_RANK"), "0");
    EXPECT_EQ(env_of(j, "GROUP_RANK"), "0");
    EXPECT_EQ(env_of(j, "MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(env_of(j, "PL_USE_AGENT_STORE"), "1");
    EXPECT_EQ(env_of(j, "PL_LAUNCH_MODE"), "<unset>");
    // The trainer flags given on plrun's command line, as given; the others not at all.
    EXPECT_EQ(env_of(j, "PL_TRAINER_DEVICES"), std::to_string(n));
    EXPECT_EQ(env_of(j, "PL_TRAINER_STRATEGY"), "independent_c");
    EXPECT_EQ(env_of(j, "PL_TRAINER_ACCELERATOR"), "cpu");
    EXPECT_EQ(env_of(j, "PL_TRAINER_PRECISION"), "<unset>");
    EXPECT_EQ(env_of(j, "PL_TRAINER_TIMEOUT"), "<unset>");
    EXPECT_EQ(env_of(j, "PL_TRAINER_NUM_NODES"), "<unset>");
    EXPECT_EQ(env_of(j, "PL_TRAINER_PROCESS_GROUP_BACKEND"), "<unset>");
    EXPECT_EQ(env_of(j, "PL_TRAINER_STRATEGY_OPTIONS"), "<unset>");
    // plrun's --plugin-path reaches the workers, so that they find the plugins plrun found.
    EXPECT_THAT(env_of(j, "PL_PLUGIN_PATH"), HasSubstr(PLRT_TEST_PLUGIN_DIR));
    // Each worker leads its own process group: a terminal's Ctrl-C reaches plrun alone.
    EXPECT_EQ(j["pgid"], j["pid"]);
    if (r == 0) {
      port = env_of(j, "MASTER_PORT");
      token = env_of(j, "PL_JOB_TOKEN");
    }
    EXPECT_EQ(env_of(j, "MASTER_PORT"), port);
    EXPECT_EQ(env_of(j, "PL_JOB_TOKEN"), token);
  }
  EXPECT_GT(std::stoi(port), 0);
  EXPECT_THAT(token, MatchesRegex("[0-9a-f]{32}"));
  expect_all_gone(dir, ranks(0, n));
}

INSTANTIATE_TEST_SUITE_P(Devices, LaunchEnv, ::testing::Values(2, 3));

TEST(Launch, StrategyOptionsReachEveryWorkerAsOneJsonObject) {
  ScratchDir dir;
  const std::string odd = "a \"quoted\" = value, with commas; {braces} $HOME `x`";
  // independent_c reads "launch" in launch_info; "note" only at create, which env_worker never calls.
  auto p = run_plrun(ppd_job(2,
                             {"--strategy-option", "launch=spawn", "--strategy-option", "note=" + odd,
                              "--strategy-option", "launch=process_per_device"},
                             {"--out-dir", dir.str()}),
                     {{"PL_TRAINER_STRATEGY_OPTIONS", R"({"inherited":"1"})"}});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  for (int r = 0; r < 2; ++r) {  // the later launch= won: one process per device, with ranks
    auto j = report(dir, "rank-" + std::to_string(r));
    auto options = nlohmann::json::parse(env_of(j, "PL_TRAINER_STRATEGY_OPTIONS"));
    EXPECT_EQ(options, nlohmann::json({{"note", odd}, {"launch", "process_per_device"}})) << options.dump();
  }
  expect_all_gone(dir, ranks(0, 2));
}

TEST(Launch, FreshTokenPerJobAndTokenFromTheEnvironment) {
  ScratchDir a, b, c;
  ASSERT_EQ(run_plrun(ppd_job(1, {}, {"--out-dir", a.str()})).exit_code, 0);
  ASSERT_EQ(run_plrun(ppd_job(1, {}, {"--out-dir", b.str()})).exit_code, 0);
  EXPECT_NE(env_of(report(a, "rank-0"), "PL_JOB_TOKEN"), env_of(report(b, "rank-0"), "PL_JOB_TOKEN"));
  auto p =
      run_plrun(ppd_job(2, {"--precision", "bf16", "--master-port", "0", "--timeout", "7.5"}, {"--out-dir", c.str()}),
                {{"PL_JOB_TOKEN", "team-token-42"}});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  for (const auto& who : ranks(0, 2)) {
    auto j = report(c, who);
    EXPECT_EQ(env_of(j, "PL_JOB_TOKEN"), "team-token-42");
    EXPECT_EQ(env_of(j, "PL_TRAINER_PRECISION"), "bf16");  // as given, not normalized
    EXPECT_EQ(env_of(j, "PL_TRAINER_TIMEOUT"), "7.5");
  }
}

TEST(Launch, SingleProcessStrategyStartsOneProcessPerNode) {
  ScratchDir dir;
  // The default strategy for one device is single_device: one process drives the node.
  auto p = run_plrun(
      {kPlrun, "--accelerator", "cpu", "--devices", "1", "--", kWorker, "--out-dir", dir.str(), "--print", "hello"});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  auto j = report(dir, "rank-0");
  EXPECT_EQ(env_of(j, "RANK"), "0");
  EXPECT_EQ(env_of(j, "WORLD_SIZE"), "1");
  EXPECT_EQ(env_of(j, "LOCAL_RANK"), "0");
  EXPECT_EQ(env_of(j, "LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(env_of(j, "PL_LAUNCH_MODE"), "<unset>");
  EXPECT_EQ(env_of(j, "PL_TRAINER_STRATEGY"), "<unset>");
  EXPECT_THAT(p.output, HasSubstr("[node 0] hello\n"));
}

TEST(Launch, SpawnStrategyStartsOneProcessPerNodeWithoutRank) {
  const std::vector<std::string> flags = {"--accelerator", "cpu", "--devices", "3", "--strategy", "ddp_spawn"};
  if (!resolves(flags)) GTEST_SKIP() << "strategy ddp_spawn does not resolve in this build (its plugin is missing)";
  ScratchDir dir;
  std::vector<std::string> argv = {kPlrun};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const std::string& s : std::vector<std::string>{"--", kWorker, "--out-dir", dir.str(), "--print", "spawned"})
    argv.push_back(s);
  auto p = run_plrun(argv);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  auto j = report(dir, "node-0");
  EXPECT_EQ(env_of(j, "PL_LAUNCH_MODE"), "spawn");
  EXPECT_EQ(env_of(j, "RANK"), "<unset>");
  EXPECT_EQ(env_of(j, "LOCAL_RANK"), "<unset>");
  EXPECT_EQ(env_of(j, "WORLD_SIZE"), "3");
  EXPECT_EQ(env_of(j, "LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(env_of(j, "NODE_RANK"), "0");
  EXPECT_EQ(env_of(j, "PL_USE_AGENT_STORE"), "1");
  EXPECT_THAT(env_of(j, "PL_JOB_TOKEN"), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_GT(std::stoi(env_of(j, "MASTER_PORT")), 0);
  EXPECT_THAT(p.output, HasSubstr("[node 0] spawned\n"));
}

TEST(Launch, SecondNodeOfTwoPointsItsWorkersAtNodeZero) {
  ScratchDir dir;
  // Node 1 serves nothing: its workers get node 0's address, the given port and the shared token.
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  auto node = [&](int rank) {
    auto s = plrun_spec(ppd_job(2,
                                {"--num-nodes", "2", "--node-rank", std::to_string(rank), "--master-addr", "127.0.0.1",
                                 "--master-port", port},
                                {"--out-dir", dir.str()}),
                        {{"PL_JOB_TOKEN", "shared-by-both-nodes"}});
    s.label = "node " + std::to_string(rank);
    return s;
  };
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(30);
  auto r = plrt_test::run_job({node(1), node(0)}, w);  // node 1 first: it waits for node 0's store
  ASSERT_TRUE(r.all_ok()) << r.report();
  for (int local = 0; local < 2; ++local) {
    auto j = report(dir, "rank-" + std::to_string(2 + local));
    EXPECT_EQ(env_of(j, "RANK"), std::to_string(2 + local));
    EXPECT_EQ(env_of(j, "LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(env_of(j, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_of(j, "LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(env_of(j, "NODE_RANK"), "1");
    EXPECT_EQ(env_of(j, "GROUP_RANK"), "1");
    EXPECT_EQ(env_of(j, "MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(env_of(j, "MASTER_PORT"), port);
    EXPECT_EQ(env_of(j, "PL_JOB_TOKEN"), "shared-by-both-nodes");
    EXPECT_EQ(env_of(j, "PL_TRAINER_NUM_NODES"), "2");
    EXPECT_EQ(env_of(j, "PL_STORE_PREFIX"), "plrt/round_0/");
    EXPECT_EQ(env_of(j, "PL_RESTART_COUNT"), "0");
    EXPECT_EQ(env_of(j, "TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(env_of(j, "TORCHELASTIC_MAX_RESTARTS"), "0");
    EXPECT_EQ(env_of(j, "TORCHELASTIC_RUN_ID"), "none");
  }
}

TEST(Launch, SecondNodeWithoutNodeZeroEndsOnASignal) {
  // Node 1 waits for node 0's store before it starts anything (the nodes agree on every round
  // there); a signal ends that wait at once.
  ScratchDir dir;
  plrt_test::Job job({plrun_spec(ppd_job(1,
                                         {"--num-nodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                                          "--master-port", std::to_string(plrt_test::free_tcp_port())},
                                         {"--out-dir", dir.str()}),
                                 {{"PL_JOB_TOKEN", "t"}})});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_FALSE(fs::exists(dir.path() / "rank-1.json"));
  job.signal(SIGTERM);
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(5);
  auto r = job.wait(w);
  ASSERT_FALSE(r.timed_out) << r.report();
  EXPECT_EQ(r.processes.at(0).exit_code, 128 + SIGTERM) << r.report();
}

TEST(Launch, TheStoreOutlivesRankZero) {
  ScratchDir dir;
  // Rank 0 leaves right after meeting the others; rank 1 then still uses the store (plrun's).
  auto p = run_plrun(ppd_job(2, {}, {"--out-dir", dir.str(), "--store-check"}));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_THAT(p.output, HasSubstr("[rank 1] store ok: 2 ranks met; rank 0 gone, store still there: here"));
}

TEST(Launch, TwoNodesMeetThroughNodeZerosStore) {
  ScratchDir dir;
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  auto node = [&](int rank) {
    auto s = plrun_spec(ppd_job(2,
                                {"--num-nodes", "2", "--node-rank", std::to_string(rank), "--master-addr", "127.0.0.1",
                                 "--master-port", port},
                                {"--out-dir", dir.str(), "--store-check"}),
                        {{"PL_JOB_TOKEN", "two-node-token"}});
    s.label = "node " + std::to_string(rank);
    return s;
  };
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(30);
  auto r = plrt_test::run_job({node(0), node(1)}, w);
  ASSERT_TRUE(r.all_ok()) << r.report();
  const std::string out = r.processes[0].output + r.processes[1].output;
  for (int rank = 1; rank < 4; ++rank)
    EXPECT_THAT(out, HasSubstr("[rank " + std::to_string(rank) + "] store ok: 4 ranks met")) << r.report();
}

TEST(Launch, NodeZeroServesTheStoreUntilEveryNodeIsDone) {
  ScratchDir dir;
  // Node 0's workers succeed at once; no other node ever reports: node 0 waits for the exit
  // barrier's timeout, then exits 0 with a warning.
  auto p = run_plrun(ppd_job(1,
                             {"--num-nodes", "2", "--master-addr", "127.0.0.1", "--master-port",
                              std::to_string(plrt_test::free_tcp_port()), "--exit-barrier-timeout", "1"},
                             {"--out-dir", dir.str()}),
                     {{"PL_JOB_TOKEN", "t"}});
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_GE(p.elapsed.count(), 1000) << p.output;
  EXPECT_LT(p.elapsed.count(), 4000) << p.output;
  EXPECT_THAT(p.output, HasSubstr("serving the store until the other nodes' are too"));
  EXPECT_THAT(p.output, HasSubstr("1 of 2 nodes reported done within 1 s"));
}

TEST(Launch, SignalEndsNodeZerosExitBarrier) {
  ScratchDir dir;
  plrt_test::Job job({plrun_spec(ppd_job(1,
                                         {"--num-nodes", "2", "--master-addr", "127.0.0.1", "--master-port",
                                          std::to_string(plrt_test::free_tcp_port())},
                                         {"--out-dir", dir.str()}),
                                 {{"PL_JOB_TOKEN", "t"}})});
  ASSERT_TRUE(wait_for_reports(dir, {"rank-0"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 has ended: plrun waits for node 1
  job.signal(SIGTERM);
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(10);
  auto r = job.wait(w);
  EXPECT_EQ(r.processes[0].exit_code, 143) << r.report();
  EXPECT_LT(r.processes[0].elapsed.count(), 3000) << r.report();
}

#ifdef DDP_WORKER_PATH
TEST(Launch, RealDdpJobTrainsThroughPlrunsStore) {
  // tests/strategies' ddp worker: the ddp plugin over gloo, the store from PL_USE_AGENT_STORE.
  auto p = run_plrun({kPlrun, "--accelerator", "cpu", "--devices", "3", "--strategy", "ddp", "--", DDP_WORKER_PATH,
                      "train", "--steps", "3"},
                     {}, std::chrono::seconds(60));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_THAT(p.output, HasSubstr("[rank " + std::to_string(r) + "] [rank " + std::to_string(r) + "/3] train: OK"));
}
#endif
