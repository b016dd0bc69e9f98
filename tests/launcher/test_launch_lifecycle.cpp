// plrun supervising a job: a failed or killed worker stops the others, signals are forwarded with
// SIGKILL after the grace period, plrun's own death takes the workers with it, output is prefixed
// line by line, and bad input fails before anything starts.  Each test checks that no process of
// the job is left.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <cstring>

#include "launcher_support.hpp"

using namespace launcher_test;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

long long ms(std::chrono::milliseconds d) { return d.count(); }

// Starts plrun, waits for the workers' reports, sends `sig` to plrun's process group (as a
// terminal's Ctrl-C does: the workers are in groups of their own) and waits for it.
plrt_test::ProcessResult signal_job(const ScratchDir& dir, std::vector<std::string> argv,
                                    const std::vector<std::string>& whos, int sig,
                                    std::chrono::milliseconds* after_signal) {
  plrt_test::Job job({plrun_spec(std::move(argv))});
  EXPECT_TRUE(wait_for_reports(dir, whos)) << "the workers did not start";
  for (const auto& w : whos) EXPECT_NE(report(dir, w)["pgid"].get<pid_t>(), job.process_group()) << w;
  const auto sent = Clock::now();
  job.signal(sig);
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(20);
  auto r = job.wait(w);
  *after_signal = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - sent);
  EXPECT_FALSE(r.timed_out) << r.report();
  return r.processes.at(0);
}

bool got_signal(const ScratchDir& dir, const std::string& who, int sig) {
  return std::filesystem::exists(dir.path() / (who + ".sig-" + std::to_string(sig)));
}

}  // namespace

TEST(LaunchLifecycle, AllWorkersExitZeroSoPlrunExitsZero) {
  ScratchDir dir;
  auto p = run_plrun(ppd_job(3, {}, {"--out-dir", dir.str(), "--sleep-ms", "100"}));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  expect_all_gone(dir, ranks(0, 3));
}

TEST(LaunchLifecycle, FailedWorkerStopsTheOthersAndGivesItsCode) {
  ScratchDir dir;
  auto p = run_plrun(ppd_job(3, {},
                             {"--out-dir", dir.str(), "--record-signals", "--fail-rank", "1", "--exit-code", "3",
                              "--delay-ms", "200", "--sleep-ms", "30000"}));
  EXPECT_EQ(p.exit_code, 3) << p.output;
  EXPECT_LT(ms(p.elapsed), 5000) << p.output;
  auto pid1 = report(dir, "rank-1")["pid"].get<int>();
  EXPECT_THAT(p.output, HasSubstr("plrun: rank 1 (pid " + std::to_string(pid1) +
                                  ") exited with code 3; stopping the other 2 workers"));
  // The others were asked to stop (SIGTERM), not just killed.
  EXPECT_TRUE(got_signal(dir, "rank-0", SIGTERM));
  EXPECT_TRUE(got_signal(dir, "rank-2", SIGTERM));
  expect_all_gone(dir, ranks(0, 3));
}

TEST(LaunchLifecycle, WorkerKilledBySignalIsReportedAs128PlusSignal) {
  ScratchDir dir;
  auto p = run_plrun(ppd_job(
      2, {},
      {"--out-dir", dir.str(), "--fail-rank", "0", "--kill-signal", "9", "--delay-ms", "100", "--sleep-ms", "30000"}));
  EXPECT_EQ(p.exit_code, 128 + SIGKILL) << p.output;
  EXPECT_LT(ms(p.elapsed), 5000) << p.output;
  EXPECT_THAT(p.output, HasSubstr("plrun: rank 0 (pid " + std::to_string(report(dir, "rank-0")["pid"].get<int>()) +
                                  ") was killed by signal 9 (SIGKILL); stopping the other 1 worker"));
  expect_all_gone(dir, ranks(0, 2));
}

TEST(LaunchLifecycle, SigtermIsForwardedAndPlrunExits143) {
  ScratchDir dir;
  std::chrono::milliseconds took{};
  auto p = signal_job(dir, ppd_job(2, {}, {"--out-dir", dir.str(), "--record-signals", "--sleep-ms", "30000"}),
                      ranks(0, 2), SIGTERM, &took);
  EXPECT_EQ(p.exit_code, 143) << p.output;
  EXPECT_LT(ms(took), 2000) << "workers that stop at once need no grace period";
  EXPECT_THAT(p.output, HasSubstr("plrun: got SIGTERM; passing it to 2 workers"));
  for (const auto& w : ranks(0, 2)) EXPECT_TRUE(got_signal(dir, w, SIGTERM)) << w << " never got SIGTERM";
  expect_all_gone(dir, ranks(0, 2));
}

class ForwardedSignal : public ::testing::TestWithParam<int> {};

TEST_P(ForwardedSignal, ReachesEveryWorkerAsItIs) {
  const int sig = GetParam();
  ScratchDir dir;
  std::chrono::milliseconds took{};
  auto p = signal_job(dir, ppd_job(2, {}, {"--out-dir", dir.str(), "--record-signals", "--sleep-ms", "30000"}),
                      ranks(0, 2), sig, &took);
  EXPECT_EQ(p.exit_code, 128 + sig) << p.output;
  EXPECT_LT(ms(took), 2000) << p.output;
  for (const auto& w : ranks(0, 2)) {
    EXPECT_TRUE(got_signal(dir, w, sig)) << w;
    EXPECT_FALSE(got_signal(dir, w, SIGTERM)) << w << " got SIGTERM: plrun sent another signal than it got";
  }
  expect_all_gone(dir, ranks(0, 2));
}

INSTANTIATE_TEST_SUITE_P(LaunchLifecycle, ForwardedSignal, ::testing::Values(SIGINT, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(sigabbrev_np(i.param)); });

TEST(LaunchLifecycle, WorkersIgnoringSigtermGetSigkillAfterTheGrace) {
  ScratchDir dir;
  std::chrono::milliseconds took{};
  auto p = signal_job(dir,
                      ppd_job(2, {"--grace-period", "1"},
                              {"--out-dir", dir.str(), "--record-signals", "--ignore-sigterm", "--sleep-ms", "30000"}),
                      ranks(0, 2), SIGTERM, &took);
  EXPECT_EQ(p.exit_code, 143) << p.output;
  EXPECT_GE(ms(took), 900) << "SIGKILL came before the grace period ended";
  EXPECT_LT(ms(took), 3000) << p.output;
  EXPECT_THAT(p.output, HasSubstr("grace period: rank 0, rank 1; sending SIGKILL"));
  for (const auto& w : ranks(0, 2)) EXPECT_TRUE(got_signal(dir, w, SIGTERM)) << w;
  expect_all_gone(dir, ranks(0, 2));
}

TEST(LaunchLifecycle, DefaultGraceStopsStubbornWorkersWithinFiveSeconds) {
  ScratchDir dir;
  std::chrono::milliseconds took{};
  auto p = signal_job(dir, ppd_job(1, {}, {"--out-dir", dir.str(), "--ignore-sigterm", "--sleep-ms", "30000"}),
                      ranks(0, 1), SIGTERM, &took);
  EXPECT_EQ(p.exit_code, 143) << p.output;
  EXPECT_GE(ms(took), 2900);  // the default grace period is 3 s
  EXPECT_LT(ms(took), 5000);
  expect_all_gone(dir, ranks(0, 1));
}

TEST(LaunchLifecycle, ASecondSignalKillsAtOnce) {
  ScratchDir dir;
  plrt_test::Job job({plrun_spec(
      ppd_job(2, {"--grace-period", "5"}, {"--out-dir", dir.str(), "--ignore-sigterm", "--sleep-ms", "30000"}))});
  ASSERT_TRUE(wait_for_reports(dir, ranks(0, 2)));
  const auto sent = Clock::now();
  job.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  job.signal(SIGINT);
  auto r = job.wait();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - sent);
  EXPECT_EQ(r.processes[0].exit_code, 143) << r.report();  // the first signal counts
  EXPECT_LT(ms(took), 2000) << r.report();
  EXPECT_THAT(r.processes[0].output, HasSubstr("got SIGINT again; killing the workers now"));
  expect_all_gone(dir, ranks(0, 2));
}

TEST(LaunchLifecycle, WorkersDieWhenPlrunIsKilled) {
  ScratchDir dir;
  plrt_test::Job job({plrun_spec(ppd_job(2, {}, {"--out-dir", dir.str(), "--ignore-sigterm", "--sleep-ms", "30000"}))});
  ASSERT_TRUE(wait_for_reports(dir, ranks(0, 2)));
  ::kill(job.pid(0), SIGKILL);  // plrun cannot forward anything: PR_SET_PDEATHSIG does it
  auto r = job.wait();
  EXPECT_EQ(r.processes[0].term_signal, SIGKILL);
  expect_all_gone(dir, ranks(0, 2), std::chrono::seconds(3));
}

TEST(LaunchLifecycle, OutputIsPrefixedOncePerLine) {
  ScratchDir dir;
  auto p = run_plrun(
      ppd_job(2, {},
              {"--out-dir", dir.str(), "--print", "hello there", "--eprint", "on stderr", "--print-tagged",
               "tagged by itself", "--print-logger", "from the logger", "--partial", "no newline at the end"}));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  for (int r = 0; r < 2; ++r) {
    const std::string tag = "[rank " + std::to_string(r) + "] ";
    EXPECT_THAT(p.output, HasSubstr(tag + "hello there\n"));
    EXPECT_THAT(p.output, HasSubstr(tag + "on stderr\n"));
    EXPECT_THAT(p.output, HasSubstr(tag + "tagged by itself\n"));
    EXPECT_THAT(p.output, Not(HasSubstr(tag + tag)));
    // The runtime logger's lines carry the tag after the time and level: left as they are.
    EXPECT_THAT(p.output, HasSubstr("\n[12:00:00.000] [info] " + tag + "from the logger\n"));
    EXPECT_THAT(p.output, HasSubstr(tag + "no newline at the end\n"));  // flushed at EOF, ended
    EXPECT_EQ(count_of(p.output, tag + "hello there"), 1u);
  }
}

TEST(LaunchLifecycle, AFloodOnStderrDoesNotBlockStdout) {
  ScratchDir dir;
  const int lines = 20000;  // ~1 MB per worker: far more than a pipe holds
  auto p =
      run_plrun(ppd_job(2, {}, {"--out-dir", dir.str(), "--flood-stderr", std::to_string(lines), "--print", "done"}));
  ASSERT_EQ(p.exit_code, 0) << p.output.substr(0, 2000);
  for (int r = 0; r < 2; ++r) {
    const std::string tag = "[rank " + std::to_string(r) + "] ";
    EXPECT_EQ(count_of(p.output, tag + "flood "), static_cast<size_t>(lines));
    EXPECT_THAT(p.output, HasSubstr(tag + "flood " + std::to_string(lines - 1) + " xxxx"));
    EXPECT_THAT(p.output, HasSubstr(tag + "done\n"));
  }
}

TEST(LaunchLifecycle, UnknownProgramIsAnErrorBeforeAnythingStarts) {
  auto p = run_plrun({kPlrun, "--", "no-such-program-plrt-xyz", "--flag"});
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_THAT(p.output, HasSubstr("program 'no-such-program-plrt-xyz' not found in PATH"));
  auto q = run_plrun({kPlrun, "--", "./missing/train"});
  EXPECT_EQ(q.exit_code, 2) << q.output;
  EXPECT_THAT(q.output, HasSubstr("cannot run program './missing/train'"));
}

TEST(LaunchLifecycle, ProgramThatIsNotExecutable) {
  ScratchDir dir;
  const std::string plain = (dir.path() / "plain.txt").string();
  std::ofstream(plain) << "not a program\n";
  auto p = run_plrun({kPlrun, "--", plain});
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_THAT(p.output, HasSubstr("'" + plain + "'"));
  EXPECT_THAT(p.output, HasSubstr("not executable"));
  // Executable but not a format exec knows (no #! line): exec itself fails; 127 as in a shell.
  const std::string garbage = (dir.path() / "garbage").string();
  std::ofstream(garbage) << "\x7f"
                         << "not an ELF file\n";
  ::chmod(garbage.c_str(), 0755);
  auto q = run_plrun({kPlrun, "--", garbage});
  EXPECT_EQ(q.exit_code, 127) << q.output;
  EXPECT_THAT(q.output, HasSubstr("cannot execute '" + garbage + "'"));
  EXPECT_THAT(q.output, HasSubstr("Exec format error"));
}

TEST(LaunchLifecycle, BadFlagsExitTwoNamingTheValue) {
  ScratchDir dir;
  auto expect_invalid = [&](std::vector<std::string> flags, const std::string& message, plrt_test::EnvVars env = {}) {
    auto p = run_plrun(ppd_job(2, flags, {"--out-dir", dir.str()}), env);
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_THAT(p.output, HasSubstr(message));
  };
  expect_invalid({"--num-nodes", "2", "--node-rank", "2", "--master-addr", "h"}, "--node-rank 2 is out of range");
  expect_invalid({"--node-rank", "-1"}, "--node-rank -1 is out of range");
  expect_invalid({"--num-nodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1"}, "needs PL_JOB_TOKEN");
  expect_invalid({"--num-nodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1"}, "openssl rand -hex 16");
  expect_invalid({"--num-nodes", "2"}, "needs --master-addr", {{"PL_JOB_TOKEN", "t"}});
  expect_invalid({"--master-port", "70000"}, "--master-port 70000 is not a TCP port");
  expect_invalid({"--num-nodes", "2", "--master-addr", "h", "--master-port", "0"}, "--master-port 0",
                 {{"PL_JOB_TOKEN", "t"}});
  expect_invalid({"--grace-period", "9"}, "--grace-period 9 is not valid");
  expect_invalid({"--assume-device-count", "4"}, "--assume-device-count 4");
  expect_invalid({"--precision", "8"}, "precision='8'");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a worker started despite the bad flags";
}
