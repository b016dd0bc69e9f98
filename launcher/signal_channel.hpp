// The signals plrun's supervisor handles, read from a signalfd in its poll loop rather than by
// handlers: the stop signals it forwards to the workers, SIGCHLD, and the death of plrun's guard
// (guard.hpp).  One channel lives as long as plrun: several supervise_round calls (restart rounds)
// and the exit barrier read the same one.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>

namespace plrt::launcher {

// The signal the guard's death arrives as (PR_SET_PDEATHSIG of the supervisor).
constexpr int kGuardDeathSignal = SIGUSR1;

// SIGINT, SIGTERM and SIGHUP (forwarded to the workers), SIGCHLD (a worker ended) and, with a
// guard, kGuardDeathSignal: blocked in every thread and read from a signalfd.  Make it before any
// thread starts (the store's): threads inherit the signal mask, and a signal that one of them took
// would be lost.  SIGPIPE is ignored: a closed stdout must not kill plrun, since the workers would
// die with it.
//
// With a guard, a stop signal may reach the supervisor twice: once directly (a terminal's Ctrl-C
// or `kill -TERM -<pgid>` reaches the whole process group, SLURM may signal every process of a
// step) and once relayed by the guard.  The two copies are one event: a signal that comes within
// a second of the same signal by the other way (relayed: sent by the guard's pid; direct: any
// other sender) is dropped, so that one Ctrl-C is not taken for two ("again: kill now").
class SignalChannel {
 public:
  // guard: the pid of plrun's guard (the supervisor's parent), 0 when there is none (tests).
  explicit SignalChannel(pid_t guard = 0);  // throws pl::Error
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;
  int fd() const { return fd_; }
  pid_t guard() const { return guard_; }

  // The next stop signal pending (SIGINT, SIGTERM, SIGHUP), or 0.  SIGCHLD is read and dropped
  // (the loop reaps on every turn anyway).  SIGKILL, once, when the guard died: plrun was killed,
  // and the supervisor must kill the job now (a kGuardDeathSignal sent while the guard lives is
  // dropped).
  int take();
  // Waits up to `ms` for a stop signal (SIGINT, SIGTERM, SIGHUP, the guard's death); returns it
  // (as take() does), or 0.
  int wait_for(std::chrono::milliseconds ms);
  // Whether the guard died (sticky): a later round must not start.
  bool guard_gone() const { return guard_gone_; }
  // The first stop signal take() returned in plrun's life (SIGKILL for the guard's death), or 0:
  // sticky across rounds, so that a restart loop can tell that the user asked plrun to stop even
  // when the signal came while a round was already stopping for a failure.
  int first_signal() const { return first_signal_; }

 private:
  struct Seen {
    std::chrono::steady_clock::time_point at{};
    bool relayed = false;
    bool matched = true;  // nothing to match
  };
  int fd_ = -1;
  pid_t guard_ = 0;
  bool guard_gone_ = false;
  int first_signal_ = 0;
  Seen seen_[NSIG];
};

}  // namespace plrt::launcher
