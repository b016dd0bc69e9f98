// plrun's supervision of the workers on its node, as torchrun's agent does it: start them, pass on
// their output line by line with their rank, forward plrun's signals, stop the job when a worker
// fails, and leave no process behind.  One thread, one poll loop; every wait in it is bounded.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
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

// One worker's end (or stop), as the supervisor saw it.
struct WorkerEvent {
  size_t index = 0;   // its position in the launches given to supervise()
  std::string label;  // WorkerSpec::label, e.g. "rank 1"
  pid_t pid = -1;
  enum class Kind {
    exited,
    killed,
    stopped
  } kind = Kind::exited;
  int code = 0;     // exited: its exit code; killed: 128 + signal; stopped: 128 + the stop signal
  std::string how;  // "exited with code 0", "was killed by signal 9 (SIGKILL)", ...
};

struct SupervisorOptions {
  std::chrono::milliseconds grace{3000};       // SIGTERM (or the forwarded signal), then SIGKILL
  std::chrono::milliseconds after_kill{2000};  // how long to wait for SIGKILLed workers to end
  std::chrono::milliseconds drain{500};        // reading the pipes once every worker has ended
  int out_fd = 1, err_fd = 2;
  // Called on the supervisor's thread for every worker that ends or stops (success included), as
  // soon as it is seen and before the supervisor acts on it; `stopping`: the job was being stopped.
  std::function<void(const WorkerEvent&, bool stopping)> on_event;
  // When this fd becomes readable, stop the workers (SIGTERM, grace period, SIGKILL) as for a
  // failure; supervise_round then returns with stop_requested.  -1: none.  Not read here.
  int stop_fd = -1;
};

struct SuperviseResult {
  int code = 0;                        // what supervise() returns
  std::optional<WorkerEvent> failure;  // the first worker that failed (non-zero exit, signal, stop)
  int signal = 0;                      // plrun got this stop signal (SIGINT, SIGTERM, SIGHUP) first
  bool stop_requested = false;         // stop_fd ended the job first
};

// Runs the job on this node and returns plrun's exit code: 0 when every worker exited 0; else the
// code of the first worker that failed (128 + signal for one killed by a signal, 127 for a program
// that could not be executed); 128 + signal when plrun got SIGINT, SIGTERM or SIGHUP first.
int supervise(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& options);
// The same, telling why the round ended.  The SignalChannel may serve several rounds.
SuperviseResult supervise_round(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& options);

}  // namespace plrt::launcher
