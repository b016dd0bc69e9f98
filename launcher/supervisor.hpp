// plrun's supervision of the workers on its node, as torchrun's agent does it: start them, pass on
// their output line by line with their rank, forward plrun's signals, stop the job when a worker
// fails, and leave no process behind.  One thread, one poll loop; every wait in it is bounded.
#pragma once

#include <chrono>
#include <vector>

#include "launch_plan.hpp"
#include "worker_process.hpp"

namespace plrt::launcher {

// The signals plrun handles: SIGINT, SIGTERM and SIGHUP (forwarded to the workers) and SIGCHLD
// (a worker ended), blocked in every thread and read from a signalfd in the poll loop.  Make it
// before any thread starts (the store's): threads inherit the signal mask, and a signal that one
// of them took would be lost.  SIGPIPE is ignored: a closed stdout must not kill plrun, since the
// workers would die with it.
class SignalChannel {
 public:
  SignalChannel();  // throws pl::Error
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;
  int fd() const { return fd_; }
  // The first of SIGINT, SIGTERM, SIGHUP that is pending, or 0 (SIGCHLD is read and dropped: the
  // loop reaps on every turn anyway).
  int take();

 private:
  int fd_ = -1;
};

struct Launch {
  WorkerSpec spec;
  ExecImage image;
};

struct SupervisorOptions {
  std::chrono::milliseconds grace{3000};       // SIGTERM (or the forwarded signal), then SIGKILL
  std::chrono::milliseconds after_kill{2000};  // how long to wait for SIGKILLed workers to end
  std::chrono::milliseconds drain{500};        // reading the pipes once every worker has ended
  int out_fd = 1, err_fd = 2;
};

// Runs the job on this node and returns plrun's exit code: 0 when every worker exited 0; else the
// code of the first worker that failed (128 + signal for one killed by a signal, 127 for a program
// that could not be executed); 128 + signal when plrun got SIGINT, SIGTERM or SIGHUP first.
int supervise(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& options);

}  // namespace plrt::launcher
