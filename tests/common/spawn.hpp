// plrt_test::Job: starts N processes (e.g. the ranks of a distributed job) with per-process
// arguments and environment, captures each one's stdout+stderr, and waits for them with an overall
// deadline.  At the deadline every process of the job gets SIGTERM, then SIGKILL after a grace
// period, and the result says which ones were still running.  Never hangs: every wait is bounded.
//
// The processes are started with posix_spawn (safe in a threaded test process), in one new process
// group per job, so that signals reach their own children too (e.g. workers started by plrun).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace plrt_test {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

struct ProcessSpec {
  std::vector<std::string> argv;       // argv[0]: the program (a path, or a name looked up in PATH)
  EnvVars env;                         // set on top of this process's environment (later entries win)
  std::vector<std::string> unset_env;  // removed from the inherited environment
  std::optional<std::string> cwd;      // working directory; default: this process's
  std::string label;                   // how reports name it; default "process <index>"
  bool capture_output = true;          // false: it writes to this process's stdout/stderr
};

struct ProcessResult {
  std::string label;
  pid_t pid = -1;
  bool exited = false;  // ended by exit(): exit_code is valid
  int exit_code = -1;
  int term_signal = 0;     // ended by this signal (0: it exited)
  bool timed_out = false;  // still running at the deadline; then stopped by SIGTERM/SIGKILL
  std::string output;      // stdout and stderr, interleaved as written
  bool output_truncated = false;
  std::chrono::milliseconds elapsed{0};  // from the job's start until this process ended

  bool ok() const { return exited && exit_code == 0 && !timed_out; }
  // "exit 0", "exit 3", "killed by signal 9 (Killed)", each with ", still running at the deadline".
  std::string status() const;
};

struct JobResult {
  std::vector<ProcessResult> processes;
  bool timed_out = false;  // the deadline passed before every process ended
  std::chrono::milliseconds elapsed{0};

  bool all_ok() const;
  std::vector<size_t> still_running() const;  // indices of the processes that timed out
  // One block per process: its label, status and output (each output cut to `max_output_chars`,
  // keeping its end).  Meant for test failure messages.
  std::string report(size_t max_output_chars = 8000) const;
};

struct WaitOptions {
  std::chrono::milliseconds deadline{60000};   // from the job's start
  std::chrono::milliseconds kill_grace{3000};  // between SIGTERM and SIGKILL
  size_t max_output_bytes = 8u << 20;          // per process; the rest is read and dropped
};

// A running job.  The destructor kills (SIGKILL) and reaps whatever is still running.
class Job {
 public:
  // Starts every process at once.  Throws std::system_error (naming the program) when one cannot be
  // started; the ones already started are then killed and reaped.
  explicit Job(std::vector<ProcessSpec> specs);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  size_t size() const { return procs_.size(); }
  pid_t pid(size_t index) const;
  pid_t process_group() const { return pgid_; }
  // Sends `sig` to every process of the job (the whole process group).
  void signal(int sig) const;
  // Reads output and reaps until all have ended or the deadline passes (then SIGTERM, grace,
  // SIGKILL).  Call once.
  JobResult wait(const WaitOptions& options = {});

 private:
  struct Proc {
    ProcessResult result;
    int fd = -1;  // read end of the output pipe; -1 once closed
    bool reaped = false;
  };
  void start(const ProcessSpec& spec, size_t index);
  bool pump(std::chrono::steady_clock::time_point until, size_t max_output);
  void reap(bool block);
  bool all_reaped() const;
  void kill_all(int sig) const;

  std::vector<Proc> procs_;
  pid_t pgid_ = 0;
  std::chrono::steady_clock::time_point start_;
  bool waited_ = false;
};

inline JobResult run_job(std::vector<ProcessSpec> specs, const WaitOptions& options = {}) {
  Job job(std::move(specs));
  return job.wait(options);
}

// ---- torchrun-style distributed jobs on one machine ----

struct DistJobOptions {
  std::vector<std::string> argv;  // the same command for every rank
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string token;        // PL_JOB_TOKEN; empty: not set (and removed if inherited)
  bool agent_store = true;  // PL_USE_AGENT_STORE=1: the launcher (the test) serves the store
  EnvVars env;              // for every rank, set after the per-rank variables
};

// One spec per rank with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// PL_JOB_TOKEN and PL_USE_AGENT_STORE; labels "rank <r>".
std::vector<ProcessSpec> dist_job(const DistJobOptions& options);

// 32 random hex characters, for PL_JOB_TOKEN.
std::string random_token();

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), for a job
// whose rank 0 serves the store.  Throws std::system_error.
int free_tcp_port();

// The first of `count` consecutive TCP ports on 127.0.0.1 that were all free a moment ago, chosen
// at random in [10000, 20000): below the kernel's ephemeral range, so that no concurrent port-0
// bind (a plrun, another test's free_tcp_port) takes one of them meanwhile.  For launchers that use
// a port and the next (torchrun's agent store on MASTER_PORT, plrt's store on MASTER_PORT + 1).
// Throws std::system_error when none is found.
int free_tcp_ports(int count);

}  // namespace plrt_test
