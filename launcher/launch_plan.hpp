// What plrun starts on this node and with which environment (torchrun's variables, plrt's own),
// worked out from the resolved job and the command line before any process starts.  Pure data and
// checks, so that the tests can read the plan without starting anything.
#pragma once

#include <functional>
#include <optional>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <utility>
#include <vector>

namespace plrt::launcher {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The launch-specific part of plrun's command line.
struct LaunchOptions {
  int num_nodes = 1;             // elastic: the MAX of --num-nodes MIN:MAX until a round says how many joined
  int min_nodes = 0;             // > 0 and < num_nodes: an elastic job (--num-nodes MIN:MAX); 0: a fixed one
  double rdzv_last_call_s = 30;  // elastic: close a round this long after its last join (>= MIN)
  double rdzv_heartbeat_s = 1;   // elastic: a node silent for 3 of these has left
  int node_rank = 0;
  std::optional<std::string> master_addr;  // default: 127.0.0.1 (single node); required otherwise
  std::optional<int> master_port;          // default: 0 = a free port (single node), 29500 otherwise
  double grace_period_s = 3.0;             // SIGTERM -> SIGKILL, in [0, kMaxGracePeriod]
  double exit_barrier_timeout_s = 300;     // several nodes: how long node 0 waits for the others (torchrun's)
  int max_restarts = 0;                    // restarts of every worker after a failure, counted job-wide
  std::string run_id = "none";             // TORCHELASTIC_RUN_ID (torchrun's --rdzv-id default)
  // --log-dir (torchrun's): each worker's output also goes, unprefixed, to
  // <log_dir>/<run_id>/attempt_<round>/<rank, or node<k> for a process per node>/{stdout,stderr}.log.
  std::optional<std::string> log_dir;
  // The trainer flags given on the command line, as given: {"DEVICES", "2"} becomes
  // PL_TRAINER_DEVICES=2.  Flags not given are not passed, so that a program's defaults apply.
  // DEVICES "usable[:N]" is the exception: the workers get the resolved list ("[1, 3]").
  // STRATEGY_OPTIONS holds --strategy-option's pairs as a JSON object (pl::encode_options).
  EnvList trainer_flags;
  // PL_PLUGIN_PATH for the workers ("" = leave the inherited one): plrun's --plugin-path folders
  // first, so that the workers find the plugins plrun resolved the job with.
  std::string plugin_path;
  // > 0: plrun's stderr is a terminal this many columns wide: the workers get PL_PROGRESS_BAR_TTY
  // and rank 0 sends its progress bar as marked lines (progress_line.hpp).  0: they get nothing.
  int progress_bar_columns = 0;
};

constexpr double kMaxGracePeriod = 5.0;  // so that stopping a job completes within 5 s
constexpr int kMaxRestarts = 1000000;
constexpr int kDefaultMultiNodePort = 29500;  // torchrun's

// Where the job's rendezvous store lives and who serves it.
struct Rendezvous {
  std::string master_addr;
  int master_port = 0;       // 0: node 0's store picks a free port (single node only)
  bool serve_store = false;  // this node's plrun serves it (node 0)
  std::string token;         // PL_JOB_TOKEN, the same on every node
};

// One process plrun starts on this node.
struct WorkerSpec {
  std::string label;   // how plrun's messages name it: "rank 3", or "node 1" for a process per node
  std::string prefix;  // put before each of its output lines: "[rank 3] " or "[node 1] "
  // A process per node (spawn, single process): the ranks it starts tag their own lines
  // "[rank M] ", and such lines are passed as they are.
  bool node_level = false;
  EnvList env;  // set on top of plrun's environment (managed_variables() removed first)
  // --log-dir: files that get the worker's output too, raw (no prefix), appended to; the supervisor
  // creates their folders.  "": none.
  std::string stdout_log, stderr_log;
};

// --num-nodes: "N" or torchrun's "MIN:MAX" (1 <= MIN <= MAX); throws pl::Error
// (PL_ERR_INVALID_ARGUMENT) naming the text and the valid forms.  Returns {MIN, MAX}.
std::pair<int, int> parse_num_nodes(const std::string& text);
bool elastic(const LaunchOptions& options);

// Checks the launch options (node rank, ports, grace period, addresses, run id, log folder's
// name); throws pl::Error
// (PL_ERR_INVALID_ARGUMENT) naming the flag, its value and what is valid.
void validate(const LaunchOptions& options);

// The store's address, who serves it and the token.  `env_token` is PL_JOB_TOKEN from plrun's
// environment (nullopt: unset); without it a single node gets `make_token()` and several nodes an
// error (every node must use the same token).
Rendezvous plan_rendezvous(const LaunchOptions& options, const std::optional<std::string>& env_token,
                           const std::function<std::string()>& make_token);

// Which round of workers of the job (see job_rounds.hpp) a plan is for.
struct Attempt {
  int round = 0;                               // 0, 1, ...: PL_RESTART_COUNT (the workers restarted for any reason)
  int restarts = 0;                            // TORCHELASTIC_RESTART_COUNT: restarts after failures (--max-restarts)
  std::string store_prefix = "plrt/round_0/";  // PL_STORE_PREFIX: the round's own store keys
};

// Where --log-dir puts a worker's output in an attempt: <log_dir>/<run_id>/attempt_<round>/<who>,
// `who` being the global rank ("3") or "node<k>" for a process per node.
std::string worker_log_folder(const std::string& log_dir, const std::string& run_id, int round, const std::string& who);

// The processes to start on this node and their environment (and, with --log-dir, their log files).  `rdv.master_port`
// must be the real port by now (node 0 reads it back from its store).
std::vector<WorkerSpec> plan_workers(const pl::JobConfig& config, const LaunchOptions& options, const Rendezvous& rdv,
                                     const Attempt& attempt = {});

// The variables plrun sets or clears in every worker's environment: an inherited RANK (plrun run
// inside another launcher) or PL_TRAINER_* must not leak into the job.
const std::vector<std::string>& managed_variables();

// `parent` ("NAME=value" entries, e.g. environ) minus managed_variables() and the names in `env`,
// then `env`.
std::vector<std::string> worker_environment(char* const* parent, const EnvList& env);

// 128 random bits as 32 hex characters (getrandom).  Throws pl::Error if the system has none.
std::string random_token();

}  // namespace plrt::launcher
