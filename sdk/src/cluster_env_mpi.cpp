// pl::ClusterEnv's MPI-family readers: Open MPI's mpirun (OMPI_COMM_WORLD_*) and horovodrun
// (HOROVOD_*, falling back on Open MPI's and MPICH's variables).  Neither launcher serves plrt's
// store: rank 0 serves it at MASTER_ADDR:MASTER_PORT, the port derived from the job id when unset.
#include <cstdint>

#include "cluster_env_vars.hpp"

namespace pl::cluster_env_detail {

namespace {

uint64_t fnv1a(const std::string& s) {  // stable across processes and builds (std::hash is not promised to be)
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// MASTER_ADDR and MASTER_PORT under an MPI launcher (`launcher` names it in messages, with its
// article: "an Open MPI"): rank 0
// serves the store there.  The address is needed on several nodes; the port defaults to one in
// [20000, 30000) derived from the job id, which every process of the job sees alike.
void mpi_rendezvous(const Env& env, ClusterEnv& c, const std::string& launcher) {
  std::string addr_from = "unset: this node", port_from;
  if (auto a = get(env, "MASTER_ADDR")) {
    c.master_addr = *a;
    addr_from = "from the environment";
  } else if (c.num_nodes > 1) {
    missing("MASTER_ADDR", launcher + " job on " + std::to_string(c.num_nodes) +
                               " nodes needs the host name of rank 0's node, where rank 0 serves the store (e.g. "
                               "mpirun -x MASTER_ADDR=host)");
  }
  const char* id_var = has(env, "OMPI_MCA_ess_base_jobid") ? "OMPI_MCA_ess_base_jobid" : "PMIX_NAMESPACE";
  if (has(env, "MASTER_PORT")) {
    c.master_port = read_port(env, "MASTER_PORT");
    port_from = "from the environment";
  } else if (has(env, id_var)) {
    c.master_port = 20000 + static_cast<int>(fnv1a(*get(env, id_var)) % 10000);
    port_from = "derived from " + shown(env, id_var);
  } else if (c.world_size > 1) {
    missing("MASTER_PORT",
            "neither OMPI_MCA_ess_base_jobid nor PMIX_NAMESPACE is set to derive it from; pass it "
            "(e.g. mpirun -x MASTER_PORT=29500)");
  }
  if (c.world_size > 1) c.rendezvous_from = rendezvous_text(c, addr_from, port_from);
}

}  // namespace

ClusterEnv from_openmpi(const Env& env) {
  ClusterEnv c;
  read_common(env, c);
  c.source = "openmpi";
  const std::string why = "mpirun sets it for every process";
  c.world_size = required_int(env, "OMPI_COMM_WORLD_SIZE", 1, INT_MAX, positive_range(), why);
  c.rank = required_int(env, "OMPI_COMM_WORLD_RANK", 0, c.world_size - 1,
                        half_open(0, "OMPI_COMM_WORLD_SIZE", c.world_size), why);
  c.local_world_size = required_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, c.world_size,
                                    "[1, OMPI_COMM_WORLD_SIZE=" + std::to_string(c.world_size) + "]", why);
  c.local_rank = required_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, c.local_world_size - 1,
                              half_open(0, "OMPI_COMM_WORLD_LOCAL_SIZE", c.local_world_size), why);
  c.node_rank = c.rank / c.local_world_size;
  c.num_nodes = (c.world_size + c.local_world_size - 1) / c.local_world_size;
  mpi_rendezvous(env, c, "an Open MPI");
  check_layout(c, "Open MPI");
  return c;
}

ClusterEnv from_horovod(const Env& env) {
  ClusterEnv c;
  read_common(env, c);
  c.source = "horovod";
  const std::string why = "horovodrun sets it for every process (or mpirun its OMPI_COMM_WORLD_* twin)";
  const std::string same =
      "both describe this process (horovodrun starts its workers itself or through mpirun, which sets both); "
      "unset or correct the wrong one";
  // Each quantity: horovodrun's variable, then Open MPI's, then MPICH's (PMI_*, MPI_LOCAL*).
  auto pick = [&](const std::vector<std::string>& names) {
    auto v = agreed(env, names, same);
    if (!v) missing(names[0] + " (or " + names[1] + ", " + names[2] + ")", why);
    return *v;
  };
  const auto size = pick({"HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  c.world_size = int_in(size.first, size.second, 1, INT_MAX, positive_range());
  const auto rank = pick({"HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  c.rank = int_in(rank.first, rank.second, 0, c.world_size - 1, half_open(0, size.first, c.world_size));
  const auto local_size = pick({"HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  c.local_world_size = int_in(local_size.first, local_size.second, 1, c.world_size,
                              "[1, " + size.first + "=" + std::to_string(c.world_size) + "]");
  const auto local_rank = pick({"HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"});
  c.local_rank = int_in(local_rank.first, local_rank.second, 0, c.local_world_size - 1,
                        half_open(0, local_size.first, c.local_world_size));
  c.num_nodes = (c.world_size + c.local_world_size - 1) / c.local_world_size;
  if (auto n = get(env, "HOROVOD_CROSS_SIZE"))
    c.num_nodes = int_in("HOROVOD_CROSS_SIZE", *n, 1, c.world_size,
                         "[1, " + size.first + "=" + std::to_string(c.world_size) + "]");
  c.node_rank = c.rank / c.local_world_size;
  if (auto r = get(env, "HOROVOD_CROSS_RANK"))
    c.node_rank = int_in("HOROVOD_CROSS_RANK", *r, 0, c.num_nodes - 1, half_open(0, "nodes", c.num_nodes));
  else if (c.node_rank >= c.num_nodes)
    bad("HOROVOD_CROSS_SIZE", *get(env, "HOROVOD_CROSS_SIZE"),
        "rank " + std::to_string(c.rank) + " with " + std::to_string(c.local_world_size) +
            " processes per node is on node " + std::to_string(c.node_rank) + "; set HOROVOD_CROSS_RANK");
  mpi_rendezvous(env, c, "a horovod");
  check_layout(c, "horovod");
  return c;
}

}  // namespace pl::cluster_env_detail
