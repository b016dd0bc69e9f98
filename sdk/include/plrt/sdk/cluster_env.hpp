// Where a worker stands in its job, read from whatever launched it (Lightning's
// ClusterEnvironment): plrun or torchrun (RANK, WORLD_SIZE, ...), SLURM (SLURM_PROCID, ...), Open
// MPI (OMPI_COMM_WORLD_RANK, ...), or nothing (a single process).
#pragma once

#include <map>
#include <string>

namespace pl {

struct ClusterEnv {
  std::string source = "none";  // "plrun", "torchrun", "slurm", "openmpi", "none"
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  int node_rank = 0, num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;       // -1: none (a single process, or the trainer picks one)
  bool agent_store = false;   // the launcher serves the store (PL_USE_AGENT_STORE=1)
  std::string token;          // PL_JOB_TOKEN ("" = none)
  // plrun started this process to spawn the node's workers itself (a spawn strategy):
  // PL_LAUNCH_MODE=spawn; rank and local_rank are then unset (0) and local_world_size counts the
  // workers to spawn.
  bool spawn_parent = false;

  bool distributed() const { return world_size > 1; }

  // Reads the process environment.  Inconsistent or malformed values throw pl::Error naming the
  // variable, its value and what is valid.  Precedence: plrun/torchrun, SLURM (not for an
  // interactive allocation: SLURM_JOB_NAME bash or interactive), Open MPI, none.
  static ClusterEnv detect();
  static ClusterEnv detect(const std::map<std::string, std::string>& env);  // the same, for tests
};

// SLURM's compressed node lists: "node[001-003,7],gpu1" -> "node001" (the first host).
std::string slurm_first_host(const std::string& nodelist);

}  // namespace pl
