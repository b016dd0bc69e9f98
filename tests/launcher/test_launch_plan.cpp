// plrun's pieces without processes: the launch plan (rendezvous, token, every launch mode's
// environment), the worker environment, the program lookup and the line prefixer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "launch_plan.hpp"
#include "line_prefixer.hpp"
#include "unit_support.hpp"
#include "worker_process.hpp"

using namespace plrt::launcher;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

using plrt_test::invalid_message;  // unit_support.hpp

namespace {

pl::JobConfig job(PL_LaunchMode mode, int ppn, int nodes) {
  pl::JobConfig c;
  c.strategy = "test";
  c.launch_mode = mode;
  c.processes_per_node = ppn;
  c.num_nodes = nodes;
  c.world_size = ppn * nodes;
  return c;
}

std::map<std::string, std::string> as_map(const EnvList& env) { return {env.begin(), env.end()}; }

std::string fixed_token() { return "generated"; }

}  // namespace

TEST(LaunchPlan, SingleNodeDefaults) {
  LaunchOptions o;
  auto r = plan_rendezvous(o, std::nullopt, fixed_token);
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_EQ(r.master_port, 0);  // a free port, read back from the store
  EXPECT_TRUE(r.serve_store);
  EXPECT_EQ(r.token, "generated");
  EXPECT_EQ(plan_rendezvous(o, std::string(""), fixed_token).token, "generated");  // empty counts as unset
  EXPECT_EQ(plan_rendezvous(o, std::string("mine"), fixed_token).token, "mine");
}

TEST(LaunchPlan, MultiNodeRendezvous) {
  LaunchOptions o;
  o.num_nodes = 3;
  o.node_rank = 2;
  o.master_addr = "node0.cluster";
  auto r = plan_rendezvous(o, std::string("tok"), fixed_token);
  EXPECT_EQ(r.master_addr, "node0.cluster");
  EXPECT_EQ(r.master_port, 29500);
  EXPECT_FALSE(r.serve_store);
  o.node_rank = 0;
  o.master_port = 1234;
  auto r0 = plan_rendezvous(o, std::string("tok"), fixed_token);
  EXPECT_TRUE(r0.serve_store);
  EXPECT_EQ(r0.master_port, 1234);
  EXPECT_THAT(invalid_message([&] { plan_rendezvous(o, std::nullopt, fixed_token); }), HasSubstr("PL_JOB_TOKEN"));
  EXPECT_THAT(invalid_message([&] { plan_rendezvous(o, std::string(5000, 'x'), fixed_token); }),
              HasSubstr("5000 bytes"));
}

TEST(LaunchPlan, ValidationNamesTheFlag) {
  LaunchOptions o;
  o.num_nodes = 2;
  o.master_addr = "h";
  o.node_rank = 5;
  EXPECT_THAT(invalid_message([&] { validate(o); }),
              HasSubstr("--node-rank 5 is out of range: with --num-nodes 2 it must be in [0, 1]"));
  o.node_rank = 0;
  o.master_port = -3;
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("--master-port -3"));
  o.master_port = 0;
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("single node only"));
  o = LaunchOptions();
  o.grace_period_s = 5.5;
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("--grace-period 5.5"));
  o.grace_period_s = std::nan("");
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("--grace-period"));
  o.grace_period_s = 0;
  o.master_addr = "";
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("--master-addr is empty"));
}

TEST(LaunchPlan, ProcessPerDeviceRanksOnTheSecondNode) {
  LaunchOptions o;
  o.num_nodes = 2;
  o.node_rank = 1;
  o.trainer_flags = {{"DEVICES", "3"}, {"NUM_NODES", "2"}, {"STRATEGY_OPTIONS", R"({"bucket_cap_mb":"10"})"}};
  o.plugin_path = "/plugins";
  Rendezvous r{"10.0.0.1", 29500, false, "tok"};
  auto ws = plan_workers(job(PL_LAUNCH_PROCESS_PER_DEVICE, 3, 2), o, r);
  ASSERT_EQ(ws.size(), 3u);
  for (int local = 0; local < 3; ++local) {
    auto env = as_map(ws[local].env);
    EXPECT_EQ(ws[local].label, "rank " + std::to_string(3 + local));
    EXPECT_EQ(ws[local].prefix, "[rank " + std::to_string(3 + local) + "] ");
    EXPECT_FALSE(ws[local].node_level);
    EXPECT_EQ(env["RANK"], std::to_string(3 + local));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(env["WORLD_SIZE"], "6");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["NODE_RANK"], "1");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29500");
    EXPECT_EQ(env["PL_JOB_TOKEN"], "tok");
    EXPECT_EQ(env["PL_USE_AGENT_STORE"], "1");
    EXPECT_EQ(env["PL_TRAINER_DEVICES"], "3");
    EXPECT_EQ(env["PL_TRAINER_NUM_NODES"], "2");
    EXPECT_EQ(env["PL_TRAINER_STRATEGY_OPTIONS"], R"({"bucket_cap_mb":"10"})");
    EXPECT_EQ(env["PL_PLUGIN_PATH"], "/plugins");
    EXPECT_EQ(env.count("PL_LAUNCH_MODE"), 0u);
    EXPECT_EQ(env.count("PL_TRAINER_PRECISION"), 0u);
  }
}

TEST(LaunchPlan, SpawnModeHasNoRank) {
  LaunchOptions o;
  o.num_nodes = 2;
  o.node_rank = 1;
  Rendezvous r{"h", 4000, false, "tok"};
  auto ws = plan_workers(job(PL_LAUNCH_SPAWN, 4, 2), o, r);
  ASSERT_EQ(ws.size(), 1u);
  auto env = as_map(ws[0].env);
  EXPECT_EQ(ws[0].label, "node 1");
  EXPECT_EQ(ws[0].prefix, "[node 1] ");
  EXPECT_TRUE(ws[0].node_level);
  EXPECT_EQ(env["PL_LAUNCH_MODE"], "spawn");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");  // the workers it must spawn
  EXPECT_EQ(env["NODE_RANK"], "1");
  EXPECT_EQ(env["MASTER_PORT"], "4000");
  EXPECT_EQ(env["PL_USE_AGENT_STORE"], "1");
  EXPECT_EQ(env.count("RANK"), 0u);
  EXPECT_EQ(env.count("LOCAL_RANK"), 0u);
  EXPECT_EQ(env.count("PL_PLUGIN_PATH"), 0u);  // nothing given: the inherited one stays
}

// --log-dir: <dir>/<run id>/attempt_<round>/<global rank, or node<k>>/{stdout,stderr}.log.
TEST(LaunchPlan, LogDirNamesEachWorkersFilesByAttempt) {
  LaunchOptions o;
  o.num_nodes = 2;
  o.node_rank = 1;
  o.run_id = "job-3";
  Rendezvous r{"h", 4000, false, "tok"};
  Attempt a{2, 2, "plrt/round_2/"};
  EXPECT_EQ(plan_workers(job(PL_LAUNCH_PROCESS_PER_DEVICE, 2, 2), o, r, a)[0].stdout_log, "");  // no --log-dir
  o.log_dir = "/logs/";
  auto ws = plan_workers(job(PL_LAUNCH_PROCESS_PER_DEVICE, 2, 2), o, r, a);
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_EQ(ws[0].stdout_log, "/logs/job-3/attempt_2/2/stdout.log");
  EXPECT_EQ(ws[1].stderr_log, "/logs/job-3/attempt_2/3/stderr.log");
  o.log_dir = "rel";
  auto spawn = plan_workers(job(PL_LAUNCH_SPAWN, 4, 2), o, r, {});
  ASSERT_EQ(spawn.size(), 1u);
  EXPECT_EQ(spawn[0].stdout_log, "rel/job-3/attempt_0/node1/stdout.log");
  EXPECT_EQ(spawn[0].stderr_log, "rel/job-3/attempt_0/node1/stderr.log");
  o.master_addr = "h";
  o.log_dir = "";
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("--log-dir is empty"));
  o.log_dir = "/logs";
  o.run_id = "..";
  EXPECT_THAT(invalid_message([&] { validate(o); }), HasSubstr("--run-id '..' is not valid with --log-dir"));
}

TEST(LaunchPlan, SingleProcessIsTheNodesOnlyRank) {
  LaunchOptions o;
  o.num_nodes = 3;
  o.node_rank = 2;
  Rendezvous r{"h", 4000, false, "tok"};
  auto ws = plan_workers(job(PL_LAUNCH_SINGLE_PROCESS, 1, 3), o, r);
  ASSERT_EQ(ws.size(), 1u);
  auto env = as_map(ws[0].env);
  EXPECT_EQ(ws[0].prefix, "[node 2] ");
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["WORLD_SIZE"], "3");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(env.count("PL_LAUNCH_MODE"), 0u);
}

TEST(LaunchPlan, InconsistentInputsAreRefused) {
  LaunchOptions o;
  Rendezvous r{"h", 4000, true, "tok"};
  EXPECT_THAT(invalid_message([&] { plan_workers(job(PL_LAUNCH_PROCESS_PER_DEVICE, 2, 2), o, r); }),
              HasSubstr("resolved to 2 nodes but --num-nodes is 1"));
  r.master_port = 0;
  EXPECT_THAT(invalid_message([&] { plan_workers(job(PL_LAUNCH_PROCESS_PER_DEVICE, 2, 1), o, r); }),
              HasSubstr("rendezvous port is 0"));
}

TEST(LaunchPlan, WorkerEnvironmentReplacesManagedVariables) {
  std::string e1 = "PATH=/bin", e2 = "RANK=9", e3 = "PL_TRAINER_PRECISION=16-mixed", e4 = "HOME=/root",
              e5 = "PL_TRAINER_MAX_EPOCHS=3", e6 = "MASTER_PORT=1", e7 = R"(PL_TRAINER_STRATEGY_OPTIONS={"a":"1"})";
  char* parent[] = {e1.data(), e2.data(), e3.data(), e4.data(), e5.data(), e6.data(), e7.data(), nullptr};
  auto env = worker_environment(parent, {{"RANK", "1"}, {"MASTER_PORT", "4000"}, {"HOME", "/w"}});
  EXPECT_THAT(env, ::testing::UnorderedElementsAre("PATH=/bin", "PL_TRAINER_MAX_EPOCHS=3", "RANK=1", "MASTER_PORT=4000",
                                                   "HOME=/w"));
}

TEST(LaunchPlan, RandomTokensAre128BitHex) {
  auto a = random_token(), b = random_token();
  EXPECT_THAT(a, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(a, b);
}

TEST(FindProgram, PathLookupAndErrors) {
  EXPECT_EQ(find_program("sh", std::string("/nonexistent:/bin:/usr/bin")), "/bin/sh");
  EXPECT_EQ(find_program("/bin/sh", std::nullopt), "/bin/sh");
  try {
    find_program("no-such-tool-xyz", std::string("/bin:/usr/bin"));
    ADD_FAILURE() << "no error";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_NOT_FOUND);
    EXPECT_THAT(e.what(), HasSubstr("program 'no-such-tool-xyz' not found in PATH (/bin:/usr/bin)"));
  }
  EXPECT_THAT(invalid_message([] { find_program("/etc", std::nullopt); }), HasSubstr("it is a directory"));
  char plain[] = "/tmp/plrun-plain-XXXXXX";
  int fd = ::mkstemp(plain);  // mode 0600: not executable
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_THAT(invalid_message([&] { find_program(plain, std::nullopt); }), HasSubstr("not executable"));
  ::unlink(plain);
  EXPECT_THAT(invalid_message([] { find_program("", std::nullopt); }), HasSubstr("empty"));
}

TEST(LinePrefixer, CompleteLinesPartialLinesAndEof) {
  LinePrefixer p("[rank 2] ", false);
  std::string out;
  p.feed("one\ntw", out);
  EXPECT_EQ(out, "[rank 2] one\n");
  p.feed("o\n\nthr", out);
  EXPECT_EQ(out, "[rank 2] one\n[rank 2] two\n[rank 2] \n");
  p.finish(out);
  EXPECT_EQ(out, "[rank 2] one\n[rank 2] two\n[rank 2] \n[rank 2] thr\n");
  std::string none;
  p.finish(none);
  EXPECT_EQ(none, "");
}

TEST(LinePrefixer, LongLinesArePassedOnInPieces) {
  LinePrefixer p("[rank 0] ", false);
  std::string out;
  p.feed(std::string(LinePrefixer::kMaxLine + 10, 'a'), out);
  EXPECT_EQ(out, "[rank 0] " + std::string(LinePrefixer::kMaxLine + 10, 'a') + "\n");
}

TEST(LinePrefixer, TaggedLinesKeepTheirTag) {
  EXPECT_TRUE(LinePrefixer::tagged("[rank 3] hello", "[rank 3] ", false));
  EXPECT_TRUE(LinePrefixer::tagged("[rank 3]", "[rank 3] ", false));
  EXPECT_TRUE(LinePrefixer::tagged("[12:00:00.123] [info] [rank 3] msg", "[rank 3] ", false));
  EXPECT_FALSE(LinePrefixer::tagged("[rank 30] hello", "[rank 3] ", false));
  EXPECT_FALSE(LinePrefixer::tagged("[rank 4] hello", "[rank 3] ", false));
  EXPECT_FALSE(LinePrefixer::tagged("hello [rank 3] x", "[rank 3] ", false));
  EXPECT_FALSE(LinePrefixer::tagged("[a] [b] [c] [d] [rank 3] too deep", "[rank 3] ", false));
  EXPECT_FALSE(LinePrefixer::tagged("[rank 3]x", "[rank 3] ", false));
  // A process per node: its spawned ranks tag their own lines.
  EXPECT_TRUE(LinePrefixer::tagged("[rank 5] from a spawned worker", "[node 1] ", true));
  EXPECT_TRUE(LinePrefixer::tagged("[12:00:00.123] [warning] [rank 5] x", "[node 1] ", true));
  EXPECT_FALSE(LinePrefixer::tagged("[rank x] nope", "[node 1] ", true));
  EXPECT_FALSE(LinePrefixer::tagged("[rank 5] x", "[node 1] ", false));
  LinePrefixer p("[node 1] ", true);
  std::string out;
  p.feed("[rank 5] a\nb\n", out);
  EXPECT_EQ(out, "[rank 5] a\n[node 1] b\n");
}
