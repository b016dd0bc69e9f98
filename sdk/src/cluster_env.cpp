// pl::ClusterEnv::detect: where this process stands in its job, read from its launcher's
// environment variables, with Lightning's defaults (its LightningEnvironment /
// TorchElasticEnvironment, SLURMEnvironment and MPIEnvironment) and the innermost launcher first
// (the header says why).  plrun, torchrun and SLURM here; Open MPI and horovodrun in
// cluster_env_mpi.cpp.  Every value is checked: a
// launcher that is misconfigured fails here, naming the variable, rather than hanging later in a
// rendezvous that can never complete.
#include "cluster_env_vars.hpp"

extern char** environ;

namespace pl {

namespace {

using namespace cluster_env_detail;

// ---- (1) plrun and torchrun ----

// plrun marks its workers with PL_USE_AGENT_STORE=1 (always) and PL_LAUNCH_MODE (spawn
// strategies); PL_JOB_TOKEN is only the store's token, which a user may export under any launcher.
bool plrun_marked(const Env& env) { return has(env, "PL_LAUNCH_MODE") || get(env, "PL_USE_AGENT_STORE") == "1"; }

// RANK, WORLD_SIZE and the rest, from plrun (`plrun` true) or torchrun (or an unmarked launcher).
ClusterEnv from_launcher(const Env& env, bool plrun) {
  ClusterEnv c;
  read_common(env, c);
  const auto mode = get(env, "PL_LAUNCH_MODE");
  if (mode && *mode != "spawn") bad("PL_LAUNCH_MODE", *mode, "plrun sets it to 'spawn' only");
  const bool torchelastic = has(env, "TORCHELASTIC_RUN_ID");
  c.source = plrun ? "plrun" : "torchrun";
  // A spawn strategy's process has no rank; the workers it starts do (and may inherit the mode).
  c.spawn_parent = mode.has_value() && !has(env, "RANK");
  const std::string who = c.source == "plrun" ? "plrun" : (torchelastic ? "torchrun" : "the launcher");

  c.world_size =
      required_int(env, "WORLD_SIZE", 1, INT_MAX, "[1, " + std::to_string(INT_MAX) + "]", who + " sets it with RANK");
  if (c.spawn_parent) {
    c.local_world_size =
        required_int(env, "LOCAL_WORLD_SIZE", 1, c.world_size, "[1, WORLD_SIZE=" + std::to_string(c.world_size) + "]",
                     "plrun sets it to the number of workers to spawn");
    if (c.world_size % c.local_world_size != 0)
      bad("LOCAL_WORLD_SIZE", std::to_string(c.local_world_size),
          "WORLD_SIZE=" + std::to_string(c.world_size) + " must be a multiple of it (the same count on every node)");
    c.rank = c.local_rank = 0;
  } else {
    c.rank = required_int(env, "RANK", 0, c.world_size - 1, half_open(0, "WORLD_SIZE", c.world_size),
                          who + " sets it with WORLD_SIZE");
    c.local_world_size = c.world_size;  // no LOCAL_WORLD_SIZE: a single node
    if (auto v = get(env, "LOCAL_WORLD_SIZE"))
      c.local_world_size =
          int_in("LOCAL_WORLD_SIZE", *v, 1, c.world_size, "[1, WORLD_SIZE=" + std::to_string(c.world_size) + "]");
    c.local_rank = c.rank % c.local_world_size;
    if (auto v = get(env, "LOCAL_RANK"))
      c.local_rank =
          int_in("LOCAL_RANK", *v, 0, c.local_world_size - 1, half_open(0, "LOCAL_WORLD_SIZE", c.local_world_size));
  }
  c.num_nodes = (c.world_size + c.local_world_size - 1) / c.local_world_size;
  c.node_rank = c.rank / c.local_world_size;
  const auto node = get(env, "NODE_RANK"), group = get(env, "GROUP_RANK");  // plrun sets both, torchrun GROUP_RANK
  const std::string nodes_range = half_open(0, "num_nodes", c.num_nodes);
  if (node) c.node_rank = int_in("NODE_RANK", *node, 0, c.num_nodes - 1, nodes_range);
  if (group) {
    int g = int_in("GROUP_RANK", *group, 0, c.num_nodes - 1, nodes_range);
    if (node && g != c.node_rank)
      bad("GROUP_RANK", *group, "it must equal NODE_RANK=" + *node + " (both are the node's rank)");
    c.node_rank = g;
  }
  if (auto a = get(env, "MASTER_ADDR")) c.master_addr = *a;
  std::string port_from = "from the environment";
  if (has(env, "MASTER_PORT"))
    c.master_port = read_port(env, "MASTER_PORT");
  else if (c.world_size > 1)
    missing("MASTER_PORT",
            "a job of " + std::to_string(c.world_size) + " processes needs the rendezvous port (" + who + " sets it)");
  // torchrun's agent may already serve PyTorch's own TCPStore on MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True).  plrt's store speaks another protocol, so rank 0 serves
  // plrt's on the next port; every rank computes the same one.
  if (c.source == "torchrun" && c.master_port > 0) {
    auto agent = get(env, "TORCHELASTIC_USE_AGENT_STORE");
    if (agent && (*agent == "True" || *agent == "true" || *agent == "1")) {
      if (c.master_port >= 65535)
        bad("MASTER_PORT", std::to_string(c.master_port),
            "plrt needs MASTER_PORT + 1 for its own store under torchrun's agent store");
      c.master_port += 1;
      port_from = "MASTER_PORT + 1: torchrun's agent store holds MASTER_PORT";
    }
  }
  if (c.world_size > 1)
    c.rendezvous_from =
        rendezvous_text(c, has(env, "MASTER_ADDR") ? "from the environment" : "unset: this node", port_from);
  check_layout(c, who);
  return c;
}

// ---- (2) SLURM ----

// SLURM_TASKS_PER_NODE ("2(x3),1": two tasks on each of three nodes, then one): the count for
// node `node`.
int slurm_tasks_on_node(const std::string& name, const std::string& text, int node) {
  const std::string form = "expected counts like '4' or '2(x3),1'";
  size_t pos = 0;
  int index = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    int repeat = 1;
    size_t paren = item.find('(');
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') bad(name, text, form);
      auto r = parse_integer(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r < 1 || *r > INT_MAX) bad(name, text, form);
      repeat = static_cast<int>(*r);
      item = item.substr(0, paren);
    }
    auto count =
        item.empty() || !std::isdigit(static_cast<unsigned char>(item[0])) ? std::nullopt : parse_integer(item);
    if (!count || *count < 1 || *count > INT_MAX) bad(name, text, form);
    if (node < index + repeat) return static_cast<int>(*count);
    index += repeat;
    pos = end + 1;
  }
  bad(name, text, "it lists " + std::to_string(index) + " node(s) but SLURM_NODEID=" + std::to_string(node));
}

ClusterEnv from_slurm(const Env& env) {
  ClusterEnv c;
  read_common(env, c);
  c.source = "slurm";
  const std::string why = "srun sets it for every task";
  c.world_size = required_int(env, "SLURM_NTASKS", 1, INT_MAX, "[1, " + std::to_string(INT_MAX) + "]", why);
  // A batch script (or salloc's shell) has the job's SLURM_NTASKS and SLURM_PROCID=0 but is no task:
  // taken for rank 0 it would wait for ranks that never come.  srun's tasks have a step id.
  if (c.world_size > 1 && !has(env, "SLURM_STEP_ID") && !has(env, "SLURM_STEPID"))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "SLURM_NTASKS=" + std::to_string(c.world_size) +
                    " but this process is not an srun task (no SLURM_STEP_ID: a batch script or an salloc shell); "
                    "start the program with srun (e.g. `srun plrt-mlp ...` in the batch script)");
  c.rank = required_int(env, "SLURM_PROCID", 0, c.world_size - 1, half_open(0, "SLURM_NTASKS", c.world_size), why);
  const std::string nodes_var = has(env, "SLURM_NNODES") ? "SLURM_NNODES" : "SLURM_JOB_NUM_NODES";
  if (!has(env, nodes_var)) missing("SLURM_NNODES (or SLURM_JOB_NUM_NODES)", why);
  c.num_nodes = int_in(nodes_var, *get(env, nodes_var), 1, INT_MAX, "[1, " + std::to_string(INT_MAX) + "]");
  c.node_rank = required_int(env, "SLURM_NODEID", 0, c.num_nodes - 1, half_open(0, nodes_var, c.num_nodes), why);
  if (auto v = get(env, "SLURM_NTASKS_PER_NODE"))
    c.local_world_size =
        int_in("SLURM_NTASKS_PER_NODE", *v, 1, c.world_size, "[1, SLURM_NTASKS=" + std::to_string(c.world_size) + "]");
  else if (auto t = get(env, "SLURM_TASKS_PER_NODE"))
    c.local_world_size = slurm_tasks_on_node("SLURM_TASKS_PER_NODE", *t, c.node_rank);
  else if (c.num_nodes == 1)
    c.local_world_size = c.world_size;
  else
    missing("SLURM_TASKS_PER_NODE",
            "with " + std::to_string(c.num_nodes) + " nodes the tasks per node are needed (" + why + ")");
  c.local_rank = required_int(env, "SLURM_LOCALID", 0, c.local_world_size - 1,
                              half_open(0, "tasks on this node", c.local_world_size), why);
  std::string addr_from = "from the environment", port_from = "from the environment";
  const std::string list_var = has(env, "SLURM_NODELIST") ? "SLURM_NODELIST" : "SLURM_JOB_NODELIST";
  if (auto a = get(env, "MASTER_ADDR")) {
    c.master_addr = *a;
  } else if (auto list = get(env, list_var)) {
    addr_from = "the first host of " + list_var;
    try {
      c.master_addr = slurm_first_host(*list);
    } catch (const Error& e) {
      throw Error(e.code(), list_var + ": " + e.what());
    }
  } else {
    addr_from = "unset: this node";
  }
  if (has(env, "MASTER_PORT")) {
    c.master_port = read_port(env, "MASTER_PORT");
  } else if (auto id = get(env, "SLURM_JOB_ID")) {
    // Lightning's rule: 15000 + the job id's last four digits, the same in every task of the job.
    auto n = parse_integer(*id);
    if (!n || *n < 0 || !std::isdigit(static_cast<unsigned char>((*id)[0])))
      bad("SLURM_JOB_ID", *id, "expected a job number");
    c.master_port = 15000 + static_cast<int>(std::stoll(id->substr(id->size() > 4 ? id->size() - 4 : 0)));
    port_from = "15000 + the last digits of SLURM_JOB_ID=" + *id;
  } else {
    c.master_port = 12910;  // Lightning's default without a job id
    port_from = "Lightning's default without SLURM_JOB_ID";
  }
  if (c.world_size > 1) c.rendezvous_from = rendezvous_text(c, addr_from, port_from);
  check_layout(c, "SLURM");
  return c;
}

// ---- which launcher ----

// An srun task: SLURM_PROCID and SLURM_NTASKS, unless the job is an interactive allocation
// (salloc's shell, SLURM_JOB_NAME bash or interactive), which Lightning ignores.
bool srun_task(const Env& env) {
  if (!has(env, "SLURM_PROCID") || !has(env, "SLURM_NTASKS")) return false;
  const auto name = get(env, "SLURM_JOB_NAME");
  return !name || (*name != "bash" && *name != "interactive");
}

// RANK and WORLD_SIZE that no launcher marked (see the header, 3.): every other per-process rank
// and size set beside them describes this same process and must agree with them.
void check_unmarked(const Env& env) {
  std::vector<std::string> ranks{"RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
  std::vector<std::string> sizes{"WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
  if (srun_task(env)) {
    ranks.push_back("SLURM_PROCID");
    sizes.push_back("SLURM_NTASKS");
  }
  bool others = false;
  for (size_t i = 1; i < ranks.size(); ++i) others = others || has(env, ranks[i]) || has(env, sizes[i]);
  if (!others) return;
  const std::string why =
      "RANK and WORLD_SIZE carry no launcher's mark (TORCHELASTIC_RUN_ID: torchrun, PL_USE_AGENT_STORE=1: plrun), so "
      "both describe this process; unset the wrong one, or set TORCHELASTIC_RUN_ID if a launcher that sets RANK "
      "started this process inside the other launcher's job";
  agreed(env, ranks, why);
  agreed(env, sizes, why);
}

// Reads with `read`; its errors name the launcher detected and the variables that said so.
template <class Read>
ClusterEnv read_as(const std::string& launcher, const std::string& because, Read read) {
  try {
    return read();
  } catch (const Error& e) {
    throw Error(e.code(), launcher + " (detected from " + because + "): " + e.what());
  }
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  auto malformed = [&](const std::string& why) -> Error {
    return Error(PL_ERR_INVALID_ARGUMENT, "the SLURM node list '" + nodelist + "' is malformed: " + why);
  };
  if (nodelist.empty()) throw malformed("it is empty");
  // The first host entry: up to the first comma outside brackets.
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    char ch = nodelist[i];
    if (ch == '[' && ++depth > 1) throw malformed("nested '['");
    if (ch == ']' && --depth < 0) throw malformed("a ']' without '['");
    if (ch == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  if (depth != 0) throw malformed("a '[' without ']'");
  const std::string entry = nodelist.substr(0, end);
  if (entry.empty()) throw malformed("it starts with a comma");
  // Each bracket group ("[001-003,7]") stands for its first value ("001", zero padding kept).
  std::string host;
  for (size_t i = 0; i < entry.size(); ++i) {
    if (entry[i] != '[') {
      host += entry[i];
      continue;
    }
    size_t close = entry.find(']', i);
    std::string group = entry.substr(i + 1, close - i - 1);
    std::string first = group.substr(0, group.find(','));
    first = first.substr(0, first.find('-'));
    if (first.empty()) throw malformed("an empty range in '[" + group + "]'");
    for (char ch : first)
      if (!std::isdigit(static_cast<unsigned char>(ch))) throw malformed("'[" + group + "]' is not a list of numbers");
    host += first;
    i = close;
  }
  return host;
}

ClusterEnv ClusterEnv::detect(const std::map<std::string, std::string>& env) {
  // Innermost launcher first (see the header): the ones that mark their workers, then the
  // per-process variables of horovodrun, mpirun and srun.
  if (plrun_marked(env))
    return read_as("plrun", has(env, "PL_LAUNCH_MODE") ? "PL_LAUNCH_MODE" : "PL_USE_AGENT_STORE=1",
                   [&] { return from_launcher(env, true); });
  if (auto id = get(env, "TORCHELASTIC_RUN_ID"))
    return read_as("torchrun", "TORCHELASTIC_RUN_ID=" + *id, [&] { return from_launcher(env, false); });
  const bool rank = has(env, "RANK"), world = has(env, "WORLD_SIZE");
  if (rank != world)
    missing(rank ? "WORLD_SIZE" : "RANK",
            std::string("a launcher sets RANK and WORLD_SIZE together, but only ") +
                (rank ? "RANK=" + *get(env, "RANK") : "WORLD_SIZE=" + *get(env, "WORLD_SIZE")) + " is set");
  if (rank)
    return read_as("an unnamed launcher", "RANK and WORLD_SIZE without TORCHELASTIC_RUN_ID or PL_USE_AGENT_STORE=1",
                   [&] {
                     check_unmarked(env);
                     return from_launcher(env, false);
                   });
  if (has(env, "HOROVOD_RANK") || has(env, "HOROVOD_SIZE"))
    return read_as("horovodrun", has(env, "HOROVOD_RANK") ? "HOROVOD_RANK" : "HOROVOD_SIZE",
                   [&] { return from_horovod(env); });
  if (has(env, "OMPI_COMM_WORLD_RANK") && has(env, "OMPI_COMM_WORLD_SIZE"))
    return read_as("Open MPI", "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE", [&] { return from_openmpi(env); });
  if (srun_task(env)) return read_as("SLURM", "SLURM_PROCID and SLURM_NTASKS", [&] { return from_slurm(env); });
  ClusterEnv c;
  read_common(env, c);
  return c;
}

ClusterEnv ClusterEnv::detect() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return detect(env);
}

}  // namespace pl
