// pl::ClusterEnv::detect: where this process stands in its job, read from its launcher's
// environment variables, with Lightning's precedence and defaults (its LightningEnvironment /
// TorchElasticEnvironment, SLURMEnvironment and MPIEnvironment).  Every value is checked: a
// launcher that is misconfigured fails here, naming the variable, rather than hanging later in a
// rendezvous that can never complete.
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/error.hpp>

extern char** environ;

namespace pl {

namespace {

using Env = std::map<std::string, std::string>;

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& valid) {
  throw Error(PL_ERR_INVALID_ARGUMENT, name + "='" + value + "' is not valid: " + valid);
}

[[noreturn]] void missing(const std::string& name, const std::string& why) {
  throw Error(PL_ERR_INVALID_ARGUMENT, name + " is not set: " + why);
}

// A set, non-empty variable (an empty one counts as unset, as Lightning's checks do).
std::optional<std::string> get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

bool has(const Env& env, const std::string& name) { return get(env, name).has_value(); }

std::optional<long long> parse_integer(const std::string& s) {
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t j = i; j < s.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return std::nullopt;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return v;
}

// `name` as an integer in [lo, hi]; `range` says what is valid in words, e.g. "[0, WORLD_SIZE=4)".
int int_in(const std::string& name, const std::string& value, long long lo, long long hi, const std::string& range) {
  auto v = parse_integer(value);
  if (!v) bad(name, value, "expected an integer in " + range);
  if (*v < lo || *v > hi) bad(name, value, "it must be in " + range);
  return static_cast<int>(*v);
}

int required_int(const Env& env, const std::string& name, long long lo, long long hi, const std::string& range,
                 const std::string& why) {
  auto v = get(env, name);
  if (!v) missing(name, why);
  return int_in(name, *v, lo, hi, range);
}

std::string half_open(int lo, const std::string& hi_name, int hi) {
  return "[" + std::to_string(lo) + ", " + hi_name + "=" + std::to_string(hi) + ")";
}

int read_port(const Env& env, const std::string& name) { return int_in(name, *get(env, name), 1, 65535, "[1, 65535]"); }

void read_common(const Env& env, ClusterEnv& c) {
  if (auto t = get(env, "PL_JOB_TOKEN")) c.token = *t;
  if (auto a = get(env, "PL_USE_AGENT_STORE")) {
    if (*a != "0" && *a != "1")
      bad("PL_USE_AGENT_STORE", *a, "use 1 (the launcher serves the store) or 0 (rank 0 serves it)");
    c.agent_store = *a == "1";
  }
}

// The checks every source shares once its fields are read.
void check_layout(const ClusterEnv& c, const std::string& origin) {
  if (c.local_world_size > c.world_size)
    throw Error(PL_ERR_INVALID_ARGUMENT, origin + ": " + std::to_string(c.local_world_size) +
                                             " processes per node is more than the world size " +
                                             std::to_string(c.world_size));
}

// ---- (1) plrun and torchrun ----

ClusterEnv from_launcher(const Env& env) {
  ClusterEnv c;
  read_common(env, c);
  const auto mode = get(env, "PL_LAUNCH_MODE");
  if (mode && *mode != "spawn") bad("PL_LAUNCH_MODE", *mode, "plrun sets it to 'spawn' only");
  const bool torchelastic = has(env, "TORCHELASTIC_RUN_ID");
  c.source = (mode || has(env, "PL_JOB_TOKEN") || has(env, "PL_USE_AGENT_STORE")) ? "plrun" : "torchrun";
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
    }
  }
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
  if (auto a = get(env, "MASTER_ADDR")) {
    c.master_addr = *a;
  } else if (auto list = get(env, "SLURM_NODELIST") ? get(env, "SLURM_NODELIST") : get(env, "SLURM_JOB_NODELIST")) {
    try {
      c.master_addr = slurm_first_host(*list);
    } catch (const Error& e) {
      throw Error(e.code(),
                  std::string(has(env, "SLURM_NODELIST") ? "SLURM_NODELIST" : "SLURM_JOB_NODELIST") + ": " + e.what());
    }
  }
  if (has(env, "MASTER_PORT")) {
    c.master_port = read_port(env, "MASTER_PORT");
  } else if (auto id = get(env, "SLURM_JOB_ID")) {
    // Lightning's rule: 15000 + the job id's last four digits, the same in every task of the job.
    auto n = parse_integer(*id);
    if (!n || *n < 0 || !std::isdigit(static_cast<unsigned char>((*id)[0])))
      bad("SLURM_JOB_ID", *id, "expected a job number");
    c.master_port = 15000 + static_cast<int>(std::stoll(id->substr(id->size() > 4 ? id->size() - 4 : 0)));
  } else {
    c.master_port = 12910;  // Lightning's default without a job id
  }
  check_layout(c, "SLURM");
  return c;
}

// ---- (3) Open MPI ----

uint64_t fnv1a(const std::string& s) {  // stable across processes and builds (std::hash is not promised to be)
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

ClusterEnv from_openmpi(const Env& env) {
  ClusterEnv c;
  read_common(env, c);
  c.source = "openmpi";
  const std::string why = "mpirun sets it for every process";
  c.world_size = required_int(env, "OMPI_COMM_WORLD_SIZE", 1, INT_MAX, "[1, " + std::to_string(INT_MAX) + "]", why);
  c.rank = required_int(env, "OMPI_COMM_WORLD_RANK", 0, c.world_size - 1,
                        half_open(0, "OMPI_COMM_WORLD_SIZE", c.world_size), why);
  c.local_world_size = required_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, c.world_size,
                                    "[1, OMPI_COMM_WORLD_SIZE=" + std::to_string(c.world_size) + "]", why);
  c.local_rank = required_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, c.local_world_size - 1,
                              half_open(0, "OMPI_COMM_WORLD_LOCAL_SIZE", c.local_world_size), why);
  c.node_rank = c.rank / c.local_world_size;
  c.num_nodes = (c.world_size + c.local_world_size - 1) / c.local_world_size;
  if (auto a = get(env, "MASTER_ADDR"))
    c.master_addr = *a;
  else if (c.num_nodes > 1)
    missing("MASTER_ADDR", "an Open MPI job on " + std::to_string(c.num_nodes) +
                               " nodes needs the host name of rank 0's node (e.g. mpirun -x MASTER_ADDR=host)");
  if (has(env, "MASTER_PORT")) {
    c.master_port = read_port(env, "MASTER_PORT");
  } else if (auto id = get(env, "OMPI_MCA_ess_base_jobid") ? get(env, "OMPI_MCA_ess_base_jobid")
                                                           : get(env, "PMIX_NAMESPACE")) {
    // Every process of the job sees the same job id, so they all derive the same port.
    c.master_port = 20000 + static_cast<int>(fnv1a(*id) % 10000);
  } else if (c.world_size > 1) {
    missing("MASTER_PORT",
            "neither OMPI_MCA_ess_base_jobid nor PMIX_NAMESPACE is set to derive it from; pass it "
            "(e.g. mpirun -x MASTER_PORT=29500)");
  }
  check_layout(c, "Open MPI");
  return c;
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
  const bool rank = has(env, "RANK"), world = has(env, "WORLD_SIZE");
  if ((rank && world) || has(env, "PL_LAUNCH_MODE") || has(env, "TORCHELASTIC_RUN_ID")) return from_launcher(env);
  if (rank != world)
    missing(rank ? "WORLD_SIZE" : "RANK",
            std::string("a launcher sets RANK and WORLD_SIZE together, but only ") +
                (rank ? "RANK=" + *get(env, "RANK") : "WORLD_SIZE=" + *get(env, "WORLD_SIZE")) + " is set");
  if (has(env, "SLURM_PROCID") && has(env, "SLURM_NTASKS")) {
    // An interactive allocation (salloc's shell) is not a job launched by srun: Lightning ignores it.
    const auto name = get(env, "SLURM_JOB_NAME");
    if (!name || (*name != "bash" && *name != "interactive")) return from_slurm(env);
  }
  if (has(env, "OMPI_COMM_WORLD_RANK") && has(env, "OMPI_COMM_WORLD_SIZE")) return from_openmpi(env);
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
