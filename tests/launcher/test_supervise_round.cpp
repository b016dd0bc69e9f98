// supervise_round as plrun's restart loop uses it, in this test process (plrun_core, no plrun):
// its events (every worker's end, success included, with whether the round was stopping), the
// failure, signal and stop request it returns, stop_fd, a stopped worker as a failure, the
// orphans of a round gone when it returns (the subreaper), several rounds on one SignalChannel,
// and SignalChannel's matching of a signal that reaches it directly and relayed by the guard.
// Each test runs in a process of its own (ctest), since the supervisor makes it a subreaper.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "process_scan.hpp"
#include "process_tree.hpp"
#include "signal_channel.hpp"
#include "supervisor.hpp"

extern char** environ;

using namespace plrt::launcher;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

namespace {

// `script` run by /bin/sh as worker "rank <index>".
Launch sh_worker(int index, const std::string& script) {
  Launch l;
  l.spec.label = "rank " + std::to_string(index);
  l.spec.prefix = "[rank " + std::to_string(index) + "] ";
  l.image.path = "/bin/sh";
  l.image.argv = {"sh", "-c", script};
  for (char** e = environ; *e; ++e) l.image.env.emplace_back(*e);
  return l;
}

// plrun's output goes to a file (always writable: the sinks never wait), read back by text().
class Output {
 public:
  Output() {
    char path[] = "/tmp/plrun-round-XXXXXX";
    fd_ = ::mkstemp(path);
    ::unlink(path);
  }
  ~Output() { ::close(fd_); }
  int fd() const { return fd_; }
  std::string text() const {
    std::string out;
    char buf[4096];
    ssize_t n;
    for (off_t at = 0; (n = ::pread(fd_, buf, sizeof buf, at)) > 0; at += n) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fd_ = -1;
};

struct Seen {
  WorkerEvent event;
  bool stopping;
};

SupervisorOptions options_for(const Output& out, std::vector<Seen>& seen) {
  SupervisorOptions o;
  o.grace = std::chrono::milliseconds(1000);
  o.out_fd = out.fd();
  o.err_fd = out.fd();
  o.on_event = [&seen](const WorkerEvent& e, bool stopping) { seen.push_back({e, stopping}); };
  return o;
}

const Seen* event_of(const std::vector<Seen>& seen, size_t index, WorkerEvent::Kind kind) {
  for (const auto& s : seen)
    if (s.event.index == index && s.event.kind == kind) return &s;
  return nullptr;
}

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Writes a byte to the pipe `fd` after `delay`, from a thread, unless cancelled first.
class WriteLater {
 public:
  WriteLater(int fd, std::chrono::milliseconds delay)
      : thread_([this, fd, delay] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cv_.wait_for(lock, delay, [this] { return cancelled_; })) (void)!::write(fd, "x", 1);
        }) {}
  ~WriteLater() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool cancelled_ = false;
  std::thread thread_;
};

}  // namespace

TEST(SuperviseRound, ReportsEveryWorkerEndAndTheFailureThatStoppedTheRound) {
  SignalChannel signals;
  Output out;
  std::vector<Seen> seen;
  std::vector<Launch> launches;
  launches.push_back(sh_worker(0, "exit 0"));
  launches.push_back(sh_worker(1, "sleep 0.3; exit 3"));
  launches.push_back(sh_worker(2, "exec sleep 30"));
  const auto start = Clock::now();
  SuperviseResult r = supervise_round(std::move(launches), signals, options_for(out, seen));
  EXPECT_LT(ms_since(start), 5000) << out.text();
  EXPECT_EQ(r.code, 3);
  ASSERT_TRUE(r.failure.has_value());
  EXPECT_EQ(r.failure->index, 1u);
  EXPECT_EQ(r.failure->label, "rank 1");
  EXPECT_EQ(r.failure->kind, WorkerEvent::Kind::exited);
  EXPECT_EQ(r.failure->code, 3);
  EXPECT_EQ(r.failure->how, "exited with code 3");
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.stop_requested);

  ASSERT_EQ(seen.size(), 3u) << out.text();
  EXPECT_EQ(seen[0].event.index, 0u);  // in the order they ended
  EXPECT_EQ(seen[1].event.index, 1u);
  EXPECT_EQ(seen[2].event.index, 2u);
  EXPECT_EQ(seen[0].event.how, "exited with code 0");
  EXPECT_FALSE(seen[0].stopping);  // a success is an event too
  EXPECT_FALSE(seen[1].stopping);
  EXPECT_EQ(seen[1].event.pid, r.failure->pid);
  EXPECT_EQ(seen[2].event.kind, WorkerEvent::Kind::killed);  // stopped by the round: not a cause
  EXPECT_EQ(seen[2].event.code, 128 + SIGTERM);
  EXPECT_EQ(seen[2].event.how, "was killed by signal 15 (SIGTERM)");
  EXPECT_TRUE(seen[2].stopping);
  for (const auto& s : seen) EXPECT_GT(s.event.pid, 0);
  EXPECT_THAT(out.text(), HasSubstr("plrun: rank 1 (pid " + std::to_string(r.failure->pid) +
                                    ") exited with code 3; stopping the other 1 worker"));
}

TEST(SuperviseRound, AllSucceed) {
  SignalChannel signals;
  Output out;
  std::vector<Seen> seen;
  std::vector<Launch> launches;
  for (int i = 0; i < 2; ++i) launches.push_back(sh_worker(i, "echo hello"));
  SuperviseResult r = supervise_round(std::move(launches), signals, options_for(out, seen));
  EXPECT_EQ(r.code, 0);
  EXPECT_FALSE(r.failure.has_value());
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.stop_requested);
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& s : seen) EXPECT_FALSE(s.stopping);
  EXPECT_THAT(out.text(), HasSubstr("[rank 0] hello\n"));
  EXPECT_THAT(out.text(), HasSubstr("[rank 1] hello\n"));
}

TEST(SuperviseRound, StopFdStopsTheRound) {
  SignalChannel signals;  // before the thread: it inherits the mask
  Output out;
  std::vector<Seen> seen;
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::vector<Launch> launches;
  for (int i = 0; i < 2; ++i) launches.push_back(sh_worker(i, "exec sleep 30"));
  SupervisorOptions o = options_for(out, seen);
  o.stop_fd = p[0];
  const auto start = Clock::now();
  SuperviseResult r;
  {
    WriteLater writer(p[1], std::chrono::milliseconds(300));
    r = supervise_round(std::move(launches), signals, o);
  }
  const auto took = ms_since(start);
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 3000) << "the workers stop at SIGTERM: no grace period needed";
  EXPECT_TRUE(r.stop_requested);
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(r.failure.has_value());
  EXPECT_EQ(r.signal, 0);
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& s : seen) {
    EXPECT_TRUE(s.stopping);
    EXPECT_EQ(s.event.code, 128 + SIGTERM);
  }
  char byte;
  EXPECT_EQ(::read(p[0], &byte, 1), 1) << "the supervisor read stop_fd";
  ::close(p[0]);
  ::close(p[1]);
}

TEST(SuperviseRound, AStoppedWorkerIsAFailure) {
  SignalChannel signals;
  Output out;
  std::vector<Seen> seen;
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::vector<Launch> launches;
  launches.push_back(sh_worker(0, "exec sleep 30"));
  launches.push_back(sh_worker(1, "kill -STOP $$; exec sleep 30"));
  SupervisorOptions o = options_for(out, seen);
  o.stop_fd = p[0];  // a watchdog: the round must not wait for the stopped worker
  const auto start = Clock::now();
  SuperviseResult r;
  {
    WriteLater watchdog(p[1], std::chrono::milliseconds(8000));
    r = supervise_round(std::move(launches), signals, o);
  }
  const auto took = ms_since(start);
  EXPECT_FALSE(r.stop_requested) << "the stopped worker went unnoticed\n" << out.text();
  EXPECT_LT(took, 5000);
  EXPECT_EQ(r.code, 128 + SIGSTOP);
  ASSERT_TRUE(r.failure.has_value()) << out.text();
  EXPECT_EQ(r.failure->index, 1u);
  EXPECT_EQ(r.failure->kind, WorkerEvent::Kind::stopped);
  EXPECT_EQ(r.failure->code, 128 + SIGSTOP);
  EXPECT_EQ(r.failure->how, "was stopped by signal 19 (SIGSTOP)");
  const Seen* stopped = event_of(seen, 1, WorkerEvent::Kind::stopped);
  ASSERT_NE(stopped, nullptr);
  EXPECT_FALSE(stopped->stopping);
  // Then stopped for good: SIGTERM and SIGCONT (a stopped process acts on SIGTERM only once
  // continued), well before the SIGKILL of the grace period.
  const Seen* ended = event_of(seen, 1, WorkerEvent::Kind::killed);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->event.code, 128 + SIGTERM);
  EXPECT_TRUE(ended->stopping);
  EXPECT_THAT(out.text(), HasSubstr("plrun: rank 1 (pid " + std::to_string(r.failure->pid) +
                                    ") was stopped by signal 19 (SIGSTOP); stopping it and the other 1 worker"));
  ::close(p[0]);
  ::close(p[1]);
}

// What a worker leaves behind, even in a session of its own (out of its process group's reach),
// is handed to the supervisor (a subreaper) and killed before the round returns; the next round
// on the same SignalChannel runs as the first.
TEST(SuperviseRound, OrphansAreGoneWhenTheRoundReturnsAndTheNextRoundRuns) {
  SignalChannel signals;
  const std::string marker = "1000." + std::to_string(::getpid()) + "7";
  for (int round = 0; round < 2; ++round) {
    Output out;
    std::vector<Seen> seen;
    std::vector<Launch> launches;
    launches.push_back(sh_worker(0, "setsid sleep " + marker + " & sleep 0.3; exit 0"));
    launches.push_back(sh_worker(1, "sleep 0.1"));
    SuperviseResult r = supervise_round(std::move(launches), signals, options_for(out, seen));
    EXPECT_EQ(r.code, 0) << out.text();
    EXPECT_EQ(seen.size(), 2u) << "an orphan is not a worker: no event for it";
    EXPECT_TRUE(process_scan::with_arg(marker).empty()) << "round " << round << ": the orphan outlived it";
    EXPECT_TRUE(process_scan::children(::getpid()).empty()) << "round " << round << ": a child left";
    EXPECT_EQ(reap_children(nullptr), -1) << "a child is left unreaped";
  }
}

// A signal reaches the supervisor directly (a terminal's Ctrl-C reaches the process group) and
// relayed by the guard: one event, not two.  A stand-in guard (a child of this test) relays.
TEST(SignalChannelTest, MatchesTheDirectAndTheRelayedCopyOfOneSignal) {
  int cmd[2], ack[2];
  ASSERT_EQ(::pipe(cmd), 0);
  ASSERT_EQ(::pipe(ack), 0);
  const pid_t self = ::getpid();
  const pid_t relay = ::fork();
  ASSERT_GE(relay, 0);
  if (relay == 0) {  // sends SIGTERM to the test for each byte, then says so
    ::close(cmd[1]);
    ::close(ack[0]);
    char c;
    while (::read(cmd[0], &c, 1) == 1) {
      ::kill(self, SIGTERM);
      (void)!::write(ack[1], &c, 1);
    }
    ::_exit(0);
  }
  SignalChannel signals(relay);
  auto relayed = [&] {
    char c = 'x';
    EXPECT_EQ(::write(cmd[1], &c, 1), 1);
    EXPECT_EQ(::read(ack[0], &c, 1), 1);
  };
  ::kill(self, SIGTERM);
  EXPECT_EQ(signals.take(), SIGTERM);
  relayed();
  EXPECT_EQ(signals.take(), 0) << "the relayed copy of the same Ctrl-C counted again";
  relayed();
  EXPECT_EQ(signals.take(), SIGTERM) << "a second relayed signal is a second event";
  ::kill(self, SIGTERM);
  EXPECT_EQ(signals.take(), 0);
  ::kill(self, SIGTERM);
  EXPECT_EQ(signals.take(), SIGTERM) << "a second direct signal is a second event";
  EXPECT_EQ(signals.first_signal(), SIGTERM);
  EXPECT_FALSE(signals.guard_gone());
  // The stand-in is not this test's parent: kGuardDeathSignal means that the guard is gone.
  ::kill(self, kGuardDeathSignal);
  EXPECT_EQ(signals.take(), SIGKILL);
  EXPECT_TRUE(signals.guard_gone());
  ::kill(self, kGuardDeathSignal);
  EXPECT_EQ(signals.take(), 0) << "the guard's death is told once";
  ::close(cmd[1]);
  ::waitpid(relay, nullptr, 0);
  for (int fd : {cmd[0], ack[0], ack[1]}) ::close(fd);
}

TEST(SignalChannelTest, WithoutAGuardEverySignalCounts) {
  SignalChannel signals;
  ::kill(::getpid(), SIGHUP);
  EXPECT_EQ(signals.take(), SIGHUP);
  ::kill(::getpid(), SIGHUP);
  EXPECT_EQ(signals.take(), SIGHUP);
  EXPECT_EQ(signals.take(), 0);
}

// A round after the guard died starts nothing.
TEST(SuperviseRound, NothingStartsOnceTheGuardIsGone) {
  SignalChannel signals(::getppid() == 1 ? 2 : 1);  // "the guard" is not this test's parent
  ::kill(::getpid(), kGuardDeathSignal);
  EXPECT_EQ(signals.take(), SIGKILL);
  Output out;
  std::vector<Seen> seen;
  std::vector<Launch> launches;
  launches.push_back(sh_worker(0, "exit 0"));
  SuperviseResult r = supervise_round(std::move(launches), signals, options_for(out, seen));
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.code, 128 + SIGKILL);
  EXPECT_TRUE(seen.empty()) << "a worker started";
}
