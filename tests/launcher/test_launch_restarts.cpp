// plrun's rounds: --max-restarts restarts every worker of the job (on every node) after a failure,
// counted job-wide; the count and the round reach the workers; exhausted restarts end the job with
// the failing worker's code; a worker that ends early makes its peers' store waits fail within
// seconds, naming it.
#include <gmock/gmock.h>

#include "launcher_support.hpp"

using namespace launcher_test;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

std::string env_of(const nlohmann::json& j, const std::string& name) {
  return j.contains("env") && j["env"].contains(name) ? j["env"][name].get<std::string>() : "<unset>";
}

// Two plrun nodes of one worker each on loopback, --max-restarts 1; rank 1 (node 1) fails with
// code 4, with `more` env_worker flags.
plrt_test::JobResult two_nodes(const ScratchDir& dir, const std::vector<std::string>& more) {
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  std::vector<std::string> worker = {"--out-dir",   dir.str(), "--fail-rank", "1",
                                     "--exit-code", "4",       "--sleep-ms",  "300"};
  worker.insert(worker.end(), more.begin(), more.end());
  std::vector<plrt_test::ProcessSpec> nodes;
  for (int rank = 0; rank < 2; ++rank) {
    auto s = plrun_spec(ppd_job(1,
                                {"--num-nodes", "2", "--node-rank", std::to_string(rank), "--master-addr", "127.0.0.1",
                                 "--master-port", port, "--max-restarts", "1", "--grace-period", "1"},
                                worker),
                        {{"PL_JOB_TOKEN", "two-node-restarts"}});
    s.label = "node " + std::to_string(rank);
    nodes.push_back(std::move(s));
  }
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(40);
  return plrt_test::run_job(nodes, w);
}

}  // namespace

TEST(LaunchRestarts, AFailedRoundRestartsEveryWorkerUntilOneSucceeds) {
  ScratchDir dir;
  // Rank 1 fails with code 3 in rounds 0 and 1; round 2 succeeds.
  auto p = run_plrun(ppd_job(2, {"--max-restarts", "3", "--grace-period", "1", "--run-id", "job-7"},
                             {"--out-dir", dir.str(), "--fail-rank", "1", "--exit-code", "3", "--fail-until-restart",
                              "2", "--sleep-ms", "200"}));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_THAT(p.output, HasSubstr("round 0 ended: rank 1 (pid "));
  EXPECT_THAT(p.output, HasSubstr("exited with code 3; restart 1 of 3 (round 1)"));
  EXPECT_THAT(p.output, HasSubstr("exited with code 3; restart 2 of 3 (round 2)"));
  EXPECT_EQ(count_of(p.output, "; restart "), 2u) << p.output;
  for (const char* who : {"rank-0", "rank-1"}) {
    auto j = report(dir, who);  // the last round's
    EXPECT_EQ(env_of(j, "PL_RESTART_COUNT"), "2") << who;
    EXPECT_EQ(env_of(j, "TORCHELASTIC_RESTART_COUNT"), "2") << who;
    EXPECT_EQ(env_of(j, "TORCHELASTIC_MAX_RESTARTS"), "3") << who;
    EXPECT_EQ(env_of(j, "TORCHELASTIC_RUN_ID"), "job-7") << who;
    EXPECT_EQ(env_of(j, "PL_STORE_PREFIX"), "plrt/round_2/") << who;
  }
  expect_all_gone(dir, ranks(0, 2));
}

TEST(LaunchRestarts, ExhaustedRestartsExitWithTheFailingWorkersCodeAndSaySo) {
  ScratchDir dir;
  auto p = run_plrun(ppd_job(2, {"--max-restarts", "2", "--grace-period", "1"},
                             {"--out-dir", dir.str(), "--fail-rank", "1", "--exit-code", "7", "--sleep-ms", "200"}));
  EXPECT_EQ(p.exit_code, 7) << p.output;
  EXPECT_EQ(count_of(p.output, "; restart "), 2u) << p.output;
  EXPECT_THAT(p.output, HasSubstr("exited with code 7; the 2 restarts allowed (--max-restarts 2) are used up: "
                                  "exiting with its code 7"));
  EXPECT_EQ(env_of(report(dir, "rank-0"), "PL_RESTART_COUNT"), "2");
  expect_all_gone(dir, ranks(0, 2));
}

TEST(LaunchRestarts, WithoutMaxRestartsAFailureEndsTheJob) {
  ScratchDir dir;
  auto p =
      run_plrun(ppd_job(2, {}, {"--out-dir", dir.str(), "--fail-rank", "0", "--exit-code", "5", "--sleep-ms", "2000"}));
  EXPECT_EQ(p.exit_code, 5) << p.output;
  EXPECT_THAT(p.output, Not(HasSubstr("restart")));
  EXPECT_EQ(env_of(report(dir, "rank-1"), "PL_RESTART_COUNT"), "0");
}

TEST(LaunchRestarts, TwoNodesRestartTogetherAndCountOnce) {
  ScratchDir dir;
  // Rank 1 (node 1) fails in round 0: node 0's worker is restarted too, and the job-wide count is
  // 1 (with --max-restarts 1, a count per node would let a second failure through).
  auto r = two_nodes(dir, {"--fail-until-restart", "1"});
  ASSERT_TRUE(r.all_ok()) << r.report();
  for (const auto& p : r.processes) EXPECT_THAT(p.output, HasSubstr("restart 1 of 1 (round 1)")) << r.report();
  EXPECT_EQ(env_of(report(dir, "rank-0"), "PL_RESTART_COUNT"), "1");
  EXPECT_EQ(env_of(report(dir, "rank-1"), "PL_RESTART_COUNT"), "1");
}

TEST(LaunchRestarts, TwoNodesFailWhenTheJobWideCountIsUsedUp) {
  ScratchDir dir;
  auto r = two_nodes(dir, {});
  ASSERT_FALSE(r.timed_out) << r.report();
  for (const auto& p : r.processes) {
    EXPECT_EQ(p.exit_code, 4) << r.report();
    EXPECT_EQ(count_of(p.output, "; restart "), 1u) << r.report();
  }
}

TEST(LaunchRestarts, ARankThatEndsEarlyFailsItsPeersWaitWithinSeconds) {
  ScratchDir dir;
  // Rank 1 exits 0 before meeting the others: rank 0's store wait (20 s) fails at once, naming it.
  const auto start = Clock::now();
  auto p = run_plrun(ppd_job(2, {}, {"--out-dir", dir.str(), "--store-check", "--exit-early-rank", "1"}));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  EXPECT_EQ(p.exit_code, 1) << p.output;
  EXPECT_LT(took.count(), 8000) << p.output;
  EXPECT_THAT(p.output, HasSubstr("[rank 0] store check failed: store wait for 'rank/0', 'rank/1' stopped waiting: "
                                  "rank 1 (pid "));
  EXPECT_THAT(p.output, HasSubstr(", node 0) exited with code 0 (recorded by the launcher"));
}

TEST(LaunchRestarts, BadRestartFlagsExitTwoBeforeAnythingStarts) {
  ScratchDir dir;
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--max-restarts", "-1"}, "--max-restarts -1 is not valid: it must be in [0, 1000000]"},
      {{"--max-restarts", "x"}, "--max-restarts"},
      {{"--run-id", "a b"}, "--run-id 'a b' is not valid: use 1 to 128 letters, digits, '.', '_' or '-'"},
      {{"--run-id", ""}, "--run-id '' is not valid"},
  };
  for (const auto& c : cases) {
    auto p = run_plrun(ppd_job(2, c.flags, {"--out-dir", dir.str()}));
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_THAT(p.output, HasSubstr(c.message));
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "rank-0.json")) << p.output;
  }
}

TEST(LaunchRestarts, ANodeOfAnotherJobIsRefusedAndTheJobGoesOn) {
  ScratchDir dir, other;
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  auto node = [&](int rank, const std::string& run_id, const std::string& token, const ScratchDir& out) {
    auto s = plrun_spec(ppd_job(1,
                                {"--num-nodes", "2", "--node-rank", std::to_string(rank), "--master-addr", "127.0.0.1",
                                 "--master-port", port, "--run-id", run_id},
                                {"--out-dir", out.str(), "--store-check"}),
                        {{"PL_JOB_TOKEN", token}});
    s.label = "node " + std::to_string(rank) + " (" + run_id + ")";
    return s;
  };
  plrt_test::Job job({node(0, "job-a", "token-a", dir)});
  ASSERT_TRUE(wait_for_reports(dir, {"rank-0"}));
  // Another run id, then another token: each is refused before it starts anything.
  auto wrong_id = plrt_test::run_job({node(1, "job-b", "token-a", other)}).processes.at(0);
  EXPECT_EQ(wrong_id.exit_code, 2) << wrong_id.output;
  EXPECT_THAT(wrong_id.output, HasSubstr("runs a job with --run-id 'job-a', --num-nodes 2; this node was started "
                                         "with --run-id 'job-b', --num-nodes 2"));
  auto wrong_token = plrt_test::run_job({node(1, "job-a", "token-b", other)}).processes.at(0);
  EXPECT_EQ(wrong_token.exit_code, 2) << wrong_token.output;
  EXPECT_THAT(wrong_token.output, HasSubstr("refused the job token"));
  EXPECT_FALSE(std::filesystem::exists(other.path() / "rank-1.json"));
  // The job itself still meets its real node 1 and ends well.
  auto right = plrt_test::run_job({node(1, "job-a", "token-a", dir)}).processes.at(0);
  EXPECT_EQ(right.exit_code, 0) << right.output;
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(20);
  auto r = job.wait(w);
  ASSERT_TRUE(r.all_ok()) << r.report();
  EXPECT_THAT(right.output, HasSubstr("[rank 1] store ok: 2 ranks met"));
}

TEST(LaunchRestarts, BadNodeRangesAndElasticFlagsExitTwoBeforeAnythingStarts) {
  ScratchDir dir;
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::string forms = "give a number of nodes N >= 1, or MIN:MAX with 1 <= MIN <= MAX (an elastic job)";
  const std::vector<Case> cases = {
      {{"--num-nodes", "3:1"}, "--num-nodes '3:1': MIN 3 is greater than MAX 1; " + forms},
      {{"--num-nodes", "0:2"}, "--num-nodes '0:2': MIN is 0; " + forms},
      {{"--num-nodes", "0"}, "--num-nodes '0': MIN is 0"},
      {{"--nnodes", "1:"}, "--num-nodes '1:' is not valid: " + forms},
      {{"--num-nodes", ":3"}, "--num-nodes ':3' is not valid"},
      {{"--num-nodes", "a:b"}, "--num-nodes 'a:b' is not valid"},
      {{"--num-nodes", "1:2:3"}, "--num-nodes '1:2:3' is not valid"},
      {{"--num-nodes", "-1"}, "--num-nodes '-1' is not valid"},
      {{"--num-nodes", "1:3", "--master-addr", "127.0.0.1", "--rdzv-last-call", "0"},
       "--rdzv-last-call 0 is not valid: it must be in (0, 3600] seconds"},
      {{"--num-nodes", "1:3", "--master-addr", "127.0.0.1", "--rdzv-heartbeat", "0.01"},
       "--rdzv-heartbeat 0.01 is not valid: it must be in [0.1, 60] seconds"},
  };
  for (const auto& c : cases) {
    auto p = run_plrun(ppd_job(1, c.flags, {"--out-dir", dir.str()}), {{"PL_JOB_TOKEN", "t"}});
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_THAT(p.output, HasSubstr(c.message));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a worker started despite the bad flags";
}

TEST(LaunchRestarts, AnElasticNodeJoinsARunningRoundWhichMakesRoomWithoutARestart) {
  ScratchDir dir;
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  auto node = [&](int rank) {
    auto s = plrun_spec(ppd_job(1,
                                {"--num-nodes", "1:2", "--node-rank", std::to_string(rank), "--master-addr",
                                 "127.0.0.1", "--master-port", port, "--rdzv-last-call", "0.5", "--grace-period", "1"},
                                {"--out-dir", dir.str(), "--sleep-ms", "2500"}),
                        {{"PL_JOB_TOKEN", "elastic"}});
    s.label = "node " + std::to_string(rank);
    return s;
  };
  plrt_test::Job first({node(0)});
  ASSERT_TRUE(wait_for_reports(dir, {"rank-0"}));  // round 0 runs with node 0 alone
  EXPECT_EQ(env_of(report(dir, "rank-0"), "WORLD_SIZE"), "1");
  std::filesystem::remove(dir.path() / "rank-0.json");
  auto second = plrt_test::run_job({node(1)}, {std::chrono::seconds(30)});
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(30);
  auto r = first.wait(w);
  ASSERT_TRUE(r.all_ok()) << r.report();
  ASSERT_TRUE(second.all_ok()) << second.report();
  EXPECT_THAT(r.processes[0].output,
              HasSubstr("asked to join the job; the nodes meet again for round 1 (not counted as a restart)"));
  for (const char* who : {"rank-0", "rank-1"}) {
    auto j = report(dir, who);
    EXPECT_EQ(env_of(j, "WORLD_SIZE"), "2") << who;
    EXPECT_EQ(env_of(j, "PL_RESTART_COUNT"), "1") << who;            // restarted once (so a trainer resumes)
    EXPECT_EQ(env_of(j, "TORCHELASTIC_RESTART_COUNT"), "0") << who;  // not a failure
    EXPECT_EQ(env_of(j, "PL_TRAINER_NUM_NODES"), "2") << who;
  }
}
