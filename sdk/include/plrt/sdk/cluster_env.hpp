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
  int master_port = -1;      // -1: none (a single process, or the trainer picks one)
  bool agent_store = false;  // the launcher serves the store (PL_USE_AGENT_STORE=1)
  std::string token;         // PL_JOB_TOKEN ("" = none)
  // plrun started this process to spawn the node's workers itself (a spawn strategy):
  // PL_LAUNCH_MODE=spawn without RANK; rank and local_rank are then unset (0) and local_world_size
  // counts the workers to spawn.  A worker it spawns sets RANK (it may keep PL_LAUNCH_MODE) and
  // reads as a plrun worker.
  bool spawn_parent = false;

  bool distributed() const { return world_size > 1; }

  // Reads the process environment.  Inconsistent or malformed values throw pl::Error naming the
  // variable, its value and what is valid.  Precedence, as Lightning's cluster environments:
  //  1. plrun or torchrun: RANK and WORLD_SIZE (or PL_LAUNCH_MODE=spawn, or TORCHELASTIC_RUN_ID);
  //     source "plrun" when PL_JOB_TOKEN, PL_USE_AGENT_STORE or PL_LAUNCH_MODE is set.  Defaults:
  //     LOCAL_WORLD_SIZE = WORLD_SIZE (one node), LOCAL_RANK = RANK % LOCAL_WORLD_SIZE, the node's
  //     rank from NODE_RANK or GROUP_RANK, else RANK / LOCAL_WORLD_SIZE.
  //  2. SLURM: SLURM_PROCID and SLURM_NTASKS, unless SLURM_JOB_NAME is bash or interactive (an
  //     salloc shell).  MASTER_ADDR defaults to the first host of SLURM_NODELIST, MASTER_PORT to
  //     15000 + the last 4 digits of SLURM_JOB_ID (Lightning's rule).
  //  3. Open MPI: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE.  MASTER_ADDR is needed on several
  //     nodes; MASTER_PORT defaults to one in [20000, 30000) derived from the job id
  //     (OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE), the same in every process.
  //  4. none: a single process.
  // Every source reads PL_JOB_TOKEN and PL_USE_AGENT_STORE (0 or 1).  Empty variables count as
  // unset.
  static ClusterEnv detect();
  static ClusterEnv detect(const std::map<std::string, std::string>& env);  // the same, for tests
};

// SLURM's compressed node lists: "node[001-003,7],gpu1" -> "node001" (the first host; every
// bracket group stands for its first number, zero padding kept).  Throws pl::Error naming the list
// when it is malformed (empty, unbalanced brackets, a group that is not numbers).
std::string slurm_first_host(const std::string& nodelist);

}  // namespace pl
