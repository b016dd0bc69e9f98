// The multi-process launcher used by the process-group and plrun tests: exit codes, captured
// output (large, from many processes at once), environment, deadline with SIGTERM then SIGKILL.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <system_error>

#include "spawn.hpp"

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace {

plrt_test::ProcessSpec sh(const std::string& script) {
  plrt_test::ProcessSpec s;
  s.argv = {"/bin/sh", "-c", script};
  return s;
}

plrt_test::WaitOptions within(std::chrono::milliseconds deadline, std::chrono::milliseconds grace = 2000ms) {
  plrt_test::WaitOptions o;
  o.deadline = deadline;
  o.kill_grace = grace;
  return o;
}

}  // namespace

TEST(Spawn, ExitCodesAndOutputPerRank) {
  plrt_test::DistJobOptions o;
  o.argv = {"/bin/sh", "-c", "echo out-$RANK-of-$WORLD_SIZE; echo err-$LOCAL_RANK >&2; exit $((RANK * 3))"};
  o.world_size = 3;
  o.master_port = 12345;
  auto r = plrt_test::run_job(plrt_test::dist_job(o), within(20s));
  ASSERT_EQ(r.processes.size(), 3u);
  EXPECT_FALSE(r.timed_out);
  for (int i = 0; i < 3; ++i) {
    const auto& p = r.processes[i];
    EXPECT_EQ(p.label, "rank " + std::to_string(i));
    EXPECT_TRUE(p.exited);
    EXPECT_EQ(p.exit_code, i * 3);
    EXPECT_THAT(p.output, HasSubstr("out-" + std::to_string(i) + "-of-3\n"));
    EXPECT_THAT(p.output, HasSubstr("err-" + std::to_string(i) + "\n"));
  }
  EXPECT_TRUE(r.processes[0].ok());
  EXPECT_FALSE(r.all_ok());
  EXPECT_THAT(r.report(), HasSubstr("rank 2"));
  EXPECT_THAT(r.report(), HasSubstr("exit 6"));
}

TEST(Spawn, DistEnvironment) {
  plrt_test::DistJobOptions o;
  o.argv = {"/bin/sh", "-c",
            "echo \"$MASTER_ADDR:$MASTER_PORT token=${PL_JOB_TOKEN-unset} agent=${PL_USE_AGENT_STORE-unset} "
            "lws=$LOCAL_WORLD_SIZE extra=$EXTRA\""};
  o.world_size = 2;
  o.master_port = 4242;
  o.token = "abc";
  o.env = {{"EXTRA", "x"}, {"EXTRA", "y"}};
  auto r = plrt_test::run_job(plrt_test::dist_job(o), within(20s));
  ASSERT_TRUE(r.all_ok()) << r.report();
  for (const auto& p : r.processes) EXPECT_EQ(p.output, "127.0.0.1:4242 token=abc agent=1 lws=2 extra=y\n");

  o.token.clear();
  o.agent_store = false;
  ::setenv("PL_JOB_TOKEN", "inherited", 1);
  auto r2 = plrt_test::run_job(plrt_test::dist_job(o), within(20s));
  ::unsetenv("PL_JOB_TOKEN");
  ASSERT_TRUE(r2.all_ok()) << r2.report();
  EXPECT_THAT(r2.processes[1].output, HasSubstr("token=unset agent=unset"));
}

TEST(Spawn, LargeOutputFromEveryProcessDoesNotDeadlock) {
  // 4 processes x 3 MB on stdout and stderr each: far beyond a pipe's 64 KiB buffer.
  std::vector<plrt_test::ProcessSpec> specs;
  for (int i = 0; i < 4; ++i)
    specs.push_back(sh("head -c 3000000 /dev/zero | tr '\\0' a; head -c 3000000 /dev/zero | tr '\\0' b >&2"));
  auto r = plrt_test::run_job(std::move(specs), within(30s));
  ASSERT_TRUE(r.all_ok()) << r.report(200);
  for (const auto& p : r.processes) {
    EXPECT_EQ(p.output.size(), 6000000u);
    EXPECT_FALSE(p.output_truncated);
  }
}

TEST(Spawn, OutputCapIsReported) {
  plrt_test::WaitOptions o = within(20s);
  o.max_output_bytes = 1000;
  auto r = plrt_test::run_job({sh("head -c 100000 /dev/zero | tr '\\0' a")}, o);
  ASSERT_TRUE(r.all_ok()) << r.report(200);
  EXPECT_EQ(r.processes[0].output.size(), 1000u);
  EXPECT_TRUE(r.processes[0].output_truncated);
}

TEST(Spawn, DeadlineStopsTheJobAndNamesWhoWasRunning) {
  auto start = std::chrono::steady_clock::now();
  auto r = plrt_test::run_job({sh("echo quick"), sh("echo slow; exec sleep 100"), sh("exit 1")}, within(700ms));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 5s);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.still_running(), std::vector<size_t>{1});
  EXPECT_TRUE(r.processes[0].ok());
  EXPECT_EQ(r.processes[2].exit_code, 1);
  EXPECT_EQ(r.processes[1].term_signal, SIGTERM);
  EXPECT_EQ(r.processes[1].output, "slow\n");
  EXPECT_THAT(r.report(), HasSubstr("still running: process 1"));
  EXPECT_THAT(r.processes[1].status(), HasSubstr("still running at the deadline"));
}

TEST(Spawn, IgnoredSigtermIsFollowedBySigkill) {
  auto start = std::chrono::steady_clock::now();
  auto r = plrt_test::run_job({sh("trap '' TERM; echo ready; sleep 100; sleep 100")}, within(500ms, 500ms));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(r.processes[0].timed_out);
  EXPECT_EQ(r.processes[0].term_signal, SIGKILL);
}

TEST(Spawn, ChildrenOfTheProcessesAreStoppedToo) {
  // The shell's background child keeps the output pipe open after the shell exits: the job is not
  // over until the deadline, and the group-wide kill ends the child.
  auto start = std::chrono::steady_clock::now();
  auto r = plrt_test::run_job({sh("sleep 100 & echo started")}, within(700ms));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(r.timed_out);
  EXPECT_TRUE(r.still_running().empty());
  EXPECT_TRUE(r.processes[0].exited);
  EXPECT_THAT(r.report(), HasSubstr("output pipes stayed open"));
}

TEST(Spawn, SignalReachesEveryProcess) {
  plrt_test::Job job({sh("exec sleep 100"), sh("exec sleep 100")});
  EXPECT_GT(job.process_group(), 0);
  job.signal(SIGINT);
  auto r = job.wait(within(10s));
  EXPECT_FALSE(r.timed_out);
  for (const auto& p : r.processes) EXPECT_EQ(p.term_signal, SIGINT);
}

TEST(Spawn, WorkingDirectoryAndUnsetEnvironment) {
  auto spec = sh("pwd; echo home=${HOME-unset}");
  spec.cwd = "/tmp";
  spec.unset_env = {"HOME"};
  auto r = plrt_test::run_job({spec}, within(10s));
  ASSERT_TRUE(r.all_ok()) << r.report();
  EXPECT_EQ(r.processes[0].output, "/tmp\nhome=unset\n");
}

TEST(Spawn, MissingProgramThrowsNamingIt) {
  plrt_test::ProcessSpec ok = sh("exec sleep 100");
  plrt_test::ProcessSpec bad;
  bad.argv = {"/nonexistent/plrt-program"};
  try {
    plrt_test::Job job({ok, bad});
    FAIL() << "expected std::system_error";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/plrt-program"));
    EXPECT_THAT(e.what(), HasSubstr("process 1"));
  }
}

TEST(Spawn, UncapturedOutputGoesToThisProcess) {
  auto spec = sh("echo to-the-parent-stdout; exit 4");
  spec.capture_output = false;
  auto r = plrt_test::run_job({spec, sh("echo captured")}, within(10s));
  EXPECT_EQ(r.processes[0].exit_code, 4);
  EXPECT_EQ(r.processes[0].output, "");
  EXPECT_EQ(r.processes[1].output, "captured\n");
}

TEST(Spawn, FreePort) {
  int p = plrt_test::free_tcp_port();
  EXPECT_GT(p, 0);
  EXPECT_LT(p, 65536);
}

// Consecutive ports below the ephemeral range, each of which this process can then listen on.
TEST(Spawn, FreePortRuns) {
  for (int round = 0; round < 20; ++round) {
    const int start = plrt_test::free_tcp_ports(3);
    EXPECT_GE(start, 10000);
    EXPECT_LE(start, 20000 - 3);
    std::vector<int> fds;
    for (int p = start; p < start + 3; ++p) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(p));
      EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
          << "port " << p << ": " << std::strerror(errno);
      fds.push_back(fd);
    }
    for (int fd : fds) ::close(fd);
  }
}

TEST(Spawn, RandomTokens) {
  auto a = plrt_test::random_token(), b = plrt_test::random_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
}
