// A one-node SLURM cluster on this machine for the SLURM tests (issue 14): munged, slurmctld and
// slurmd started from a generated slurm.conf, everything (key, sockets, state, spool, logs, pid
// files) in one temporary folder, on ports that were free.  The test binary starts it once
// (a ::testing::Environment, test_slurm.cpp) and stops it at the end: the jobs cancelled, the
// daemons sent SIGTERM, then SIGKILL after a bound, and every process that still carries this
// cluster's SLURM_CONF killed and reported.  Each daemon also runs under timeout(1), so none
// outlives a test binary that was itself killed.  Where the machine cannot run a cluster (no SLURM
// or munge programs, not root) start() says why and the tests skip.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace plrt_slurm {

class SlurmCluster {
 public:
  SlurmCluster() = default;
  ~SlurmCluster();  // stop()
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Starts munged, slurmctld and slurmd and waits (20 s at most) until sinfo shows the node idle.
  // Afterwards exactly one of: up(), skip_reason() (this machine cannot run one), error().
  void start();
  bool up() const { return up_; }
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& error() const { return error_; }

  // Cancels every job, stops the daemons (SIGTERM, SIGKILL after 10 s each) and removes the
  // folder.  Returns what was still running after that and had to be killed ("" = nothing).
  // Safe to call twice.
  std::string stop();

  const std::filesystem::path& dir() const { return dir_; }
  std::string conf() const { return (dir_ / "slurm.conf").string(); }
  const std::string& node() const { return node_; }  // the node's name (this host's short name)
  long first_job_id() const { return first_job_id_; }

  // A SLURM client (srun, sbatch, squeue, scontrol, scancel; found like the daemons) run with
  // this cluster's SLURM_CONF and without the caller's own SLURM_*, rank and MASTER_* variables,
  // bounded by `deadline`.
  plrt_test::ProcessResult client(std::vector<std::string> argv,
                                  std::chrono::milliseconds deadline = std::chrono::seconds(30),
                                  plrt_test::EnvVars env = {}) const;
  // A field of `scontrol show job -o <id>` ("JobState", "ExitCode"); "" when it is not shown.
  std::string job_field(const std::string& job_id, const std::string& field) const;
  // Waits until job `job_id` has ended (its JobState is no longer PENDING, RUNNING, SUSPENDED or
  // COMPLETING), polling scontrol; returns its JobState, or "" when `deadline` passed first.
  std::string wait_for_job(const std::string& job_id, std::chrono::milliseconds deadline) const;
  // The last lines of each daemon's log, for failure messages.
  std::string logs() const;

 private:
  struct Daemon {
    std::string name;
    std::unique_ptr<plrt_test::Job> job;
    std::chrono::steady_clock::time_point started;
    std::string log;  // its stdout and stderr
  };
  bool fail(const std::string& why);
  bool skip(const std::string& why);
  bool make_munge_key();
  bool write_conf();
  bool start_daemon(const std::string& name, std::vector<std::string> argv);
  bool running(const Daemon& d) const;
  bool wait_until_idle(std::chrono::milliseconds deadline);
  std::string stop_daemon(Daemon& d);
  std::string kill_leftovers() const;
  plrt_test::EnvVars cluster_env() const;

  std::filesystem::path dir_;
  std::string node_;       // NodeName: slurmd -C's
  std::string node_line_;  // slurmd -C's first line: NodeName=... CPUs=... RealMemory=...
  long first_job_id_ = 0;
  std::vector<Daemon> daemons_;  // started in order: munged, slurmctld, slurmd
  bool up_ = false, stopped_ = false;
  std::string skip_reason_, error_;
};

// The port plrt's ClusterEnv must derive from a SLURM job id (Lightning's rule, written
// independently here): 15000 + the id's last four digits.
inline int slurm_master_port(long job_id) { return 15000 + static_cast<int>(job_id % 10000); }

// Single-quotes `s` for a POSIX shell script.
std::string shell_quote(const std::string& s);

}  // namespace plrt_slurm
