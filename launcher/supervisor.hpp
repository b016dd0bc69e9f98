// plrun's supervision of the workers on its node, as torchrun's agent does it: start them, pass on
// their output line by line with their rank (and, with --log-dir, raw to each worker's files: see
// WorkerSpec::stdout_log), forward plrun's signals, stop the job when a worker
// fails (exits non-zero, is killed, or is stopped), and leave no process behind.  One thread, one
// poll loop; every wait in it is bounded.  One call is one round; a restart loop calls it again
// with the same SignalChannel.
//
// No process behind: the supervisor is a child subreaper (process_tree.hpp), so that whatever a
// worker leaves (its children, a daemon in a session of its own) is handed to it when its parent
// ends; it reaps every child (waitpid(-1)), the workers by pid and the orphans silently.  It
// signals a worker's process group only while the worker is not reaped (its pid, hence its group's
// id, cannot be reused by another process until then); when the round ends it kills (SIGKILL) its
// remaining children, again until none is left (killing one hands its children over).  A stopped
// worker (SIGSTOP, SIGTSTP) is a failure as an ended one is: the others would wait for it until
// their collective timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launch_plan.hpp"
#include "signal_channel.hpp"
#include "worker_process.hpp"

namespace plrt::launcher {

struct Launch {
  WorkerSpec spec;
  ExecImage image;
};

// One worker's end (or stop), as the supervisor saw it.
struct WorkerEvent {
  size_t index = 0;   // its position in the launches given to supervise_round()
  std::string label;  // WorkerSpec::label, e.g. "rank 1"
  pid_t pid = -1;
  enum class Kind {
    exited,
    killed,
    stopped
  } kind = Kind::exited;
  int code = 0;     // exited: its exit code (127: it could not be executed); killed: 128 + signal;
                    // stopped: 128 + the stop signal
  std::string how;  // "exited with code 0", "was killed by signal 9 (SIGKILL)",
                    // "was stopped by signal 19 (SIGSTOP)", "could not be executed: <why>"
};

struct SupervisorOptions {
  std::chrono::milliseconds grace{3000};       // SIGTERM (or the forwarded signal), then SIGKILL
  std::chrono::milliseconds after_kill{2000};  // how long to wait for SIGKILLed processes to end
  std::chrono::milliseconds drain{500};        // reading the pipes once every worker has ended
  int out_fd = 1, err_fd = 2;
  // err_fd is a terminal and the workers were told so (PL_PROGRESS_BAR_TTY): rank 0's bar frames
  // are kept as its last line (progress_line.hpp); the workers' stdout goes there too when out_fd
  // is a terminal as well, so that no line of theirs is glued to the bar.
  bool progress_bar = false;
  // Called on the supervisor's thread for every worker that ends or stops (success included), as
  // soon as it is seen and before the supervisor acts on it; `stopping`: the round was already
  // being stopped (by an earlier failure, a signal or stop_fd), so this end is not a cause.  Not
  // called for the orphans the supervisor reaps.  It must not throw (an exception is reported on
  // stderr and dropped) and must not reap children.
  std::function<void(const WorkerEvent&, bool stopping)> on_event;
  // When this fd becomes readable, stop the workers (SIGTERM, grace period, SIGKILL) as for a
  // failure; supervise_round() then returns with stop_requested true.  -1: none.  The supervisor
  // does not read it (it only polls it until the round stops).
  int stop_fd = -1;
};

struct SuperviseResult {
  int code = 0;                        // what supervise() returns (below)
  std::optional<WorkerEvent> failure;  // the worker whose failure stopped the round, if one did
  int signal = 0;                      // the round was stopped by this signal of plrun's (SIGINT,
                                       // SIGTERM, SIGHUP; SIGKILL: plrun's guard died)
  bool stop_requested = false;         // the round was stopped by stop_fd
};

// Runs one round of the job on this node.  Returns when every worker and every orphan of the round
// has been reaped, or after a bounded give-up (a process that survives SIGKILL for `after_kill` is
// reported on stderr and left).  code: 0 when every worker exited 0; else the code of the first
// worker that failed (128 + signal for one killed by a signal, 128 + stop signal for a stopped
// one, 127 for a program that could not be executed); 128 + signal when plrun got SIGINT, SIGTERM
// or SIGHUP first (137 when its guard died); 1 when stop_fd stopped the round, or when plrun could
// not start a worker (no pipe, no fork: then failure, signal and stop_requested are all unset).
// It reaps any child of this process (waitpid(-1)) and, when the round ends, kills every child
// that is not a worker: call it where every child is plrun's (start none of your own meanwhile,
// e.g. from on_event).  stop_fd is polled, never read: drain it or pass another before the next
// round, or that round stops at once.  When signals.guard_gone(), it starts nothing and returns
// signal SIGKILL, code 137.
SuperviseResult supervise_round(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& options);

// supervise_round(...).code.
int supervise(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& options);

}  // namespace plrt::launcher
