// Where a worker stands in its job, read from whatever launched it (Lightning's
// ClusterEnvironment): plrun or torchrun (RANK, WORLD_SIZE, ...), horovodrun (HOROVOD_RANK, ...),
// Open MPI (OMPI_COMM_WORLD_RANK, ...), SLURM (SLURM_PROCID, ...), or nothing (a single process).
#pragma once

#include <map>
#include <string>

namespace pl {

struct ClusterEnv {
  std::string source = "none";  // "plrun", "torchrun", "horovod", "openmpi", "slurm", "none"
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  int node_rank = 0, num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;      // -1: none (a single process, or the trainer picks one)
  bool agent_store = false;  // the launcher serves the store (PL_USE_AGENT_STORE=1)
  std::string token;         // PL_JOB_TOKEN ("" = none)
  // Where master_addr and master_port came from, for messages about the store (a rank that cannot
  // reach it names them): e.g. "MASTER_ADDR=head, MASTER_PORT=24242 derived from
  // OMPI_MCA_ess_base_jobid=4242 (launcher: openmpi)".  Empty for a single process.
  std::string rendezvous_from;
  // plrun started this process to spawn the node's workers itself (a spawn strategy):
  // PL_LAUNCH_MODE=spawn without RANK; rank and local_rank are then unset (0) and local_world_size
  // counts the workers to spawn.  A worker it spawns sets RANK (it may keep PL_LAUNCH_MODE) and
  // reads as a plrun worker.
  bool spawn_parent = false;

  bool distributed() const { return world_size > 1; }

  // Reads the process environment.  Inconsistent or malformed values throw pl::Error
  // (PL_ERR_INVALID_ARGUMENT) naming the launcher detected, the variables, their values and what is
  // valid.  Empty variables count as unset.
  //
  // Which launcher: the one that started this process, i.e. the innermost when launchers nest
  // (torchrun inside an srun allocation, plrun started by mpirun on each node, mpirun inside
  // sbatch).  Its variables win; the outer launcher's describe the process that ran the inner one
  // (SLURM_PROCID of the torchrun task, OMPI_COMM_WORLD_RANK of the node's plrun) and are ignored
  // even where they differ.  Lightning lists SLURM first, which misreads a torchrun or mpirun
  // started inside sbatch; plrt looks for the launchers that mark their workers first:
  //  1. plrun: PL_USE_AGENT_STORE=1 (plrun always sets it) or PL_LAUNCH_MODE.  Wins over
  //     TORCHELASTIC_RUN_ID (plrun may export torchelastic's variables to its workers).  PL_JOB_TOKEN
  //     is only the store's token and says nothing about the launcher.
  //  2. torchrun: TORCHELASTIC_RUN_ID.  Its agent may serve PyTorch's store on MASTER_PORT
  //     (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 then serves plrt's on MASTER_PORT + 1.
  //     For 1 and 2: RANK and WORLD_SIZE; LOCAL_WORLD_SIZE defaults to WORLD_SIZE (one node),
  //     LOCAL_RANK to RANK % LOCAL_WORLD_SIZE, the node's rank to NODE_RANK or GROUP_RANK, else
  //     RANK / LOCAL_WORLD_SIZE.
  //  3. RANK and WORLD_SIZE without either mark (set by hand, a wrapper script, another launcher):
  //     read as in 1-2 (source "torchrun"), after a check: no launcher started this process that
  //     is known to have, so every per-process rank variable that is also set describes this same
  //     process and must agree: RANK with HOROVOD_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK and (an
  //     srun task) SLURM_PROCID; WORLD_SIZE with HOROVOD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE,
  //     SLURM_NTASKS.  A wrapper that exports RANK=$OMPI_COMM_WORLD_RANK passes; `mpirun -x RANK=1`
  //     does not.  Mark an inner launcher (TORCHELASTIC_RUN_ID) to keep differing outer values.
  //  4. horovodrun: HOROVOD_RANK or HOROVOD_SIZE.  Rank from HOROVOD_RANK, else
  //     OMPI_COMM_WORLD_RANK, else PMI_RANK; size from HOROVOD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE;
  //     local rank and size from HOROVOD_LOCAL_RANK / HOROVOD_LOCAL_SIZE, else Open MPI's, else
  //     MPICH's (MPI_LOCALRANKID / MPI_LOCALNRANKS); the node from HOROVOD_CROSS_RANK and
  //     HOROVOD_CROSS_SIZE, else rank / local size.  horovodrun's MPI mode starts the workers
  //     through mpirun, so each pair describes the same process: every one set must agree
  //     (HOROVOD_SIZE=2 with OMPI_COMM_WORLD_SIZE=4 is an error).  The store as for Open MPI.
  //  5. Open MPI: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (mpirun's daemons export them; srun
  //     does not, so they mean mpirun started this process, even inside an allocation).  No
  //     launcher serves the store: rank 0 serves it at MASTER_ADDR:MASTER_PORT.  MASTER_ADDR is
  //     needed on several nodes (else 127.0.0.1); MASTER_PORT defaults to one in [20000, 30000)
  //     derived from the job id (OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE), the same in every
  //     process.  Pass them with `mpirun -x MASTER_ADDR=host -x MASTER_PORT=port`.
  //  6. SLURM: SLURM_PROCID and SLURM_NTASKS, unless SLURM_JOB_NAME is bash or interactive (an
  //     salloc shell).  MASTER_ADDR defaults to the first host of SLURM_NODELIST, MASTER_PORT to
  //     15000 + the last 4 digits of SLURM_JOB_ID (Lightning's rule).
  //  7. none: a single process.
  // Every source reads PL_JOB_TOKEN and PL_USE_AGENT_STORE (0 or 1).
  static ClusterEnv detect();
  static ClusterEnv detect(const std::map<std::string, std::string>& env);  // the same, for tests
};

// SLURM's compressed node lists: "node[001-003,7],gpu1" -> "node001" (the first host; every
// bracket group stands for its first number, zero padding kept).  Throws pl::Error naming the list
// when it is malformed (empty, unbalanced brackets, a group that is not numbers).
std::string slurm_first_host(const std::string& nodelist);

}  // namespace pl
