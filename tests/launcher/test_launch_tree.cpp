// plrun's whole process tree, end to end: nothing of the job outlives a plrun killed by SIGKILL
// (its guard, the pid the user sees, or its supervisor), a worker stopped by SIGSTOP stops the
// job, and stopping a job never signals the process group of a worker already reaped (its pid may
// belong to an unrelated process by then).  The job's processes are found by a marker argument
// unique to the test (`sleep 1000.<test pid><n>`).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "launcher_support.hpp"
#include "process_scan.hpp"

using namespace launcher_test;
using ::testing::HasSubstr;

namespace {

// plrun running `sh -c script` in `devices` cpu worker processes.
std::vector<std::string> sh_job(int devices, const std::string& script) {
  return {kPlrun,
          "--plugin-path",
          PLRT_TEST_PLUGIN_DIR,
          "--strategy",
          "independent_c",
          "--accelerator",
          "cpu",
          "--devices",
          std::to_string(devices),
          "--",
          "sh",
          "-c",
          script};
}

std::string marker(int n) { return "1000." + std::to_string(::getpid()) + std::to_string(n); }

// Starts plrun with two workers that each start `sleep <marker>` and wait for it; returns once
// both sleeps run (null, with a failure, when they do not).  `no_core`: plrun runs without core
// dumps (a test that sends SIGQUIT).
std::unique_ptr<plrt_test::Job> start_sleepers(const std::string& mark, bool no_core = false) {
  std::vector<std::string> argv = sh_job(2, "sleep " + mark + " & wait");
  if (no_core) argv.insert(argv.begin(), {"sh", "-c", "ulimit -c 0; exec \"$0\" \"$@\""});
  auto job = std::make_unique<plrt_test::Job>(std::vector<plrt_test::ProcessSpec>{plrun_spec(argv)});
  const bool started =
      process_scan::wait_until([&] { return process_scan::with_arg(mark).size() == 2; }, std::chrono::seconds(10));
  EXPECT_TRUE(started) << "the workers' sleeps did not start";
  return started ? std::move(job) : nullptr;
}

void expect_no_process_with(const std::string& mark) {
  EXPECT_TRUE(process_scan::wait_until([&] { return process_scan::with_arg(mark).empty(); }, std::chrono::seconds(5)))
      << process_scan::with_arg(mark).size() << " process(es) of the job outlived plrun (`sleep " << mark << "`)";
}

}  // namespace

TEST(LaunchTree, NothingOutlivesAPlrunKilledBySigkill) {
  const std::string mark = marker(1);
  auto job = start_sleepers(mark);
  ASSERT_TRUE(job);
  ::kill(job->pid(0), SIGKILL);  // the guard: the supervisor gets kGuardDeathSignal
  auto r = job->wait();
  EXPECT_EQ(r.processes[0].term_signal, SIGKILL) << r.report();
  expect_no_process_with(mark);
}

TEST(LaunchTree, NothingOutlivesASupervisorKilledBySigkill) {
  const std::string mark = marker(2);
  auto job = start_sleepers(mark);
  ASSERT_TRUE(job);
  auto supervisor = process_scan::children(job->pid(0));
  ASSERT_EQ(supervisor.size(), 1u) << "plrun's guard has one child, the supervisor";
  ::kill(supervisor[0], SIGKILL);  // the workers die of PR_SET_PDEATHSIG; their children go to the guard
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(15);
  auto r = job->wait(w);
  EXPECT_FALSE(r.timed_out) << r.report();
  EXPECT_EQ(r.processes[0].exit_code, 128 + SIGKILL) << r.report();
  EXPECT_THAT(r.processes[0].output, HasSubstr("plrun: the supervisor (pid " + std::to_string(supervisor[0]) +
                                               ") was killed by signal 9 (SIGKILL)"));
  expect_no_process_with(mark);
}

// A terminal's Ctrl-\ reaches plrun's guard and supervisor: the supervisor dies of it (a core
// dump, as plrun always did), the guard cleans up and exits 128 + SIGQUIT.
TEST(LaunchTree, NothingOutlivesSigquit) {
  const std::string mark = marker(3);
  auto job = start_sleepers(mark, /*no_core=*/true);
  ASSERT_TRUE(job);
  job->signal(SIGQUIT);
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(15);
  auto r = job->wait(w);
  EXPECT_FALSE(r.timed_out) << r.report();
  EXPECT_EQ(r.processes[0].exit_code, 128 + SIGQUIT) << r.report();
  EXPECT_THAT(r.processes[0].output, HasSubstr("was killed by signal 3 (SIGQUIT)"));
  expect_no_process_with(mark);
}

TEST(LaunchTree, AStoppedWorkerStopsTheJob) {
  auto p = run_plrun(sh_job(2, "if [ \"$RANK\" = 1 ]; then kill -STOP $$; fi; exec sleep 30"));
  EXPECT_EQ(p.exit_code, 128 + SIGSTOP) << p.output;
  EXPECT_LT(p.elapsed.count(), 5000) << p.output;
  EXPECT_THAT(p.output, HasSubstr("plrun: rank 1 (pid "));
  EXPECT_THAT(p.output, HasSubstr(") was stopped by signal 19 (SIGSTOP); stopping it and the other 1 worker"));
}

// Rank 0 ends well and is reaped; its pid is then given to an unrelated process that leads a
// process group of its own (as a shell's job does); stopping the job must leave that one alone.
// The kernel hands out the next pid after /proc/sys/kernel/ns_last_pid, which root may write.
TEST(LaunchTree, StoppingTheJobSparesAProcessThatReusedAReapedWorkersPid) {
  int last_pid = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (last_pid < 0)
    GTEST_SKIP() << "needs a writable /proc/sys/kernel/ns_last_pid (root in this pid namespace) to reuse a pid: "
                 << std::strerror(errno);
  ScratchDir dir;
  plrt_test::Job job({plrun_spec(
      ppd_job(2, {}, {"--out-dir", dir.str(), "--fail-rank", "0", "--exit-code", "0", "--sleep-ms", "30000"}))});
  ASSERT_TRUE(wait_for_reports(dir, ranks(0, 2)));
  const pid_t reused = report(dir, "rank-0")["pid"].get<pid_t>();
  ASSERT_TRUE(
      process_scan::wait_until([&] { return ::kill(reused, 0) != 0 && errno == ESRCH; }, std::chrono::seconds(10)))
      << "plrun did not reap rank 0";
  pid_t other = -1;
  for (int attempt = 0; attempt < 50 && other != reused; ++attempt) {
    if (other > 0) {
      ::kill(other, SIGKILL);
      ::waitpid(other, nullptr, 0);
    }
    if (::kill(reused, 0) == 0 || errno != ESRCH) break;  // taken by someone else meanwhile
    const std::string before = std::to_string(reused - 1);
    ASSERT_EQ(::pwrite(last_pid, before.data(), before.size(), 0), static_cast<ssize_t>(before.size()));
    other = ::fork();
    ASSERT_GE(other, 0);
    if (other == 0) {
      ::setpgid(0, 0);
      for (;;) ::pause();  // SIGTERM and SIGKILL end it (default actions)
    }
  }
  ::close(last_pid);
  if (other != reused) {
    if (other > 0) {
      ::kill(other, SIGKILL);
      ::waitpid(other, nullptr, 0);
    }
    GTEST_SKIP() << "could not get pid " << reused << " again (other processes are forking)";
  }
  ::setpgid(other, other);  // whichever runs first: the group exists before plrun may signal it
  job.signal(SIGTERM);
  auto r = job.wait();
  EXPECT_EQ(r.processes[0].exit_code, 143) << r.report();
  int status = 0;
  const pid_t ended = ::waitpid(other, &status, WNOHANG);
  EXPECT_EQ(ended, 0) << "plrun signalled the process group of its reaped rank 0 (pid " << reused
                      << "), which belonged to an unrelated process: "
                      << (ended > 0 && WIFSIGNALED(status)
                              ? "it was killed by signal " + std::to_string(WTERMSIG(status))
                              : std::string("it ended"));
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
}
