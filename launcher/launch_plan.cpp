// plrun's launch plan: checks, the rendezvous (address, port, token) and each worker's environment.
#include "launch_plan.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <plrt/sdk/usable_devices.hpp>
#include <set>

#include "progress_line.hpp"

namespace plrt::launcher {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw pl::Error(PL_ERR_INVALID_ARGUMENT, message); }

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

constexpr size_t kMaxTokenBytes = 4096;    // the store's limit (docs/store-protocol.md)
constexpr double kMaxExitBarrier = 86400;  // a day: a bound, not a wish

}  // namespace

void validate(const LaunchOptions& o) {
  if (o.num_nodes < 1) invalid("--num-nodes " + std::to_string(o.num_nodes) + " is not valid: it must be >= 1");
  if (elastic(o)) {
    if (!(o.rdzv_last_call_s > 0 && o.rdzv_last_call_s <= 3600))
      invalid("--rdzv-last-call " + format_seconds(o.rdzv_last_call_s) +
              " is not valid: it must be in (0, 3600] seconds");
    if (!(o.rdzv_heartbeat_s >= 0.1 && o.rdzv_heartbeat_s <= 60))
      invalid("--rdzv-heartbeat " + format_seconds(o.rdzv_heartbeat_s) +
              " is not valid: it must be in [0.1, 60] seconds");
  }
  if (o.node_rank < 0 || o.node_rank >= o.num_nodes)
    invalid("--node-rank " + std::to_string(o.node_rank) + " is out of range: with --num-nodes " +
            std::to_string(o.num_nodes) + " it must be in [0, " + std::to_string(o.num_nodes - 1) + "]");
  if (o.master_port && (*o.master_port < 0 || *o.master_port > 65535))
    invalid("--master-port " + std::to_string(*o.master_port) +
            " is not a TCP port: valid ports are 0..65535 (0: a free port, for a single node)");
  if (o.master_addr && o.master_addr->empty())
    invalid("--master-addr is empty: give the host name or address of node 0");
  if (o.num_nodes > 1) {
    if (!o.master_addr)
      invalid("--num-nodes " + std::to_string(o.num_nodes) +
              " needs --master-addr: the host name or address of node 0, which every node can reach");
    if (o.master_port && *o.master_port == 0)
      invalid("--master-port 0 (a free port) works on a single node only: with --num-nodes " +
              std::to_string(o.num_nodes) + " every node must know the port in advance (default " +
              std::to_string(kDefaultMultiNodePort) + ")");
  }
  if (!(o.grace_period_s >= 0 && o.grace_period_s <= kMaxGracePeriod))  // also catches NaN
    invalid("--grace-period " + format_seconds(o.grace_period_s) + " is not valid: it must be in [0, " +
            format_seconds(kMaxGracePeriod) + "] seconds");
  if (o.max_restarts < 0 || o.max_restarts > kMaxRestarts)
    invalid("--max-restarts " + std::to_string(o.max_restarts) + " is not valid: it must be in [0, " +
            std::to_string(kMaxRestarts) + "] (0: a failed worker ends the job)");
  if (o.run_id.empty() || o.run_id.size() > 128 ||
      o.run_id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos)
    invalid("--run-id '" + o.run_id + "' is not valid: use 1 to 128 letters, digits, '.', '_' or '-'");
  if (o.log_dir) {
    if (o.log_dir->empty()) invalid("--log-dir is empty: give a folder for the workers' log files");
    if (o.run_id == "." || o.run_id == "..")
      invalid("--run-id '" + o.run_id + "' is not valid with --log-dir: it names a folder under " + *o.log_dir +
              "; use another name");
  }
  if (!(o.exit_barrier_timeout_s > 0 && o.exit_barrier_timeout_s <= kMaxExitBarrier))
    invalid("--exit-barrier-timeout " + format_seconds(o.exit_barrier_timeout_s) + " is not valid: it must be in (0, " +
            format_seconds(kMaxExitBarrier) + "] seconds");
}

Rendezvous plan_rendezvous(const LaunchOptions& o, const std::optional<std::string>& env_token,
                           const std::function<std::string()>& make_token) {
  validate(o);
  Rendezvous r;
  const bool multi = o.num_nodes > 1;
  r.master_addr = o.master_addr.value_or("127.0.0.1");
  r.master_port = o.master_port.value_or(multi ? kDefaultMultiNodePort : 0);
  r.serve_store = o.node_rank == 0;
  // An empty PL_JOB_TOKEN counts as unset: the store would accept anyone with an empty token.
  if (env_token && !env_token->empty()) {
    if (env_token->size() > kMaxTokenBytes)
      invalid("PL_JOB_TOKEN is " + std::to_string(env_token->size()) + " bytes long; the store accepts at most " +
              std::to_string(kMaxTokenBytes));
    r.token = *env_token;
  } else if (multi) {
    invalid("--num-nodes " + std::to_string(o.num_nodes) +
            " needs PL_JOB_TOKEN: every node must export the same job token, e.g. run "
            "`export PL_JOB_TOKEN=$(openssl rand -hex 16)` once and pass it to every node's plrun");
  } else {
    r.token = make_token();
  }
  return r;
}

std::pair<int, int> parse_num_nodes(const std::string& text) {
  auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 6 || part.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(part);
  };
  const size_t colon = text.find(':');
  const int lo = number(text.substr(0, colon)), hi = colon == std::string::npos ? lo : number(text.substr(colon + 1));
  const std::string forms = "give a number of nodes N >= 1, or MIN:MAX with 1 <= MIN <= MAX (an elastic job)";
  if (lo < 0 || hi < 0) invalid("--num-nodes '" + text + "' is not valid: " + forms);
  if (lo < 1) invalid("--num-nodes '" + text + "': MIN is " + std::to_string(lo) + "; " + forms);
  if (lo > hi)
    invalid("--num-nodes '" + text + "': MIN " + std::to_string(lo) + " is greater than MAX " + std::to_string(hi) +
            "; " + forms);
  return {lo, hi};
}

bool elastic(const LaunchOptions& o) { return o.min_nodes > 0 && o.min_nodes < o.num_nodes; }

std::string worker_log_folder(const std::string& log_dir, const std::string& run_id, int round,
                              const std::string& who) {
  std::string dir = log_dir;
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + run_id + "/attempt_" + std::to_string(round) + "/" + who;
}

std::vector<WorkerSpec> plan_workers(const pl::JobConfig& c, const LaunchOptions& o, const Rendezvous& r,
                                     const Attempt& a) {
  if (c.num_nodes != o.num_nodes)
    invalid("the job resolved to " + std::to_string(c.num_nodes) + " nodes but --num-nodes is " +
            std::to_string(o.num_nodes));
  if (c.processes_per_node < 1 || c.world_size != c.processes_per_node * c.num_nodes)
    invalid("the job resolved to an inconsistent size: " + std::to_string(c.processes_per_node) +
            " processes per node, " + std::to_string(c.num_nodes) + " nodes, world size " +
            std::to_string(c.world_size));
  if (r.master_port <= 0)
    invalid("the rendezvous port is " + std::to_string(r.master_port) + ": workers need the store's real port");

  const int ppn = c.processes_per_node;
  EnvList common = {
      {"WORLD_SIZE", std::to_string(c.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(ppn)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"GROUP_RANK", std::to_string(o.node_rank)},  // torchrun's name for the node's rank
      {"MASTER_ADDR", r.master_addr},
      {"MASTER_PORT", std::to_string(r.master_port)},
      {"PL_JOB_TOKEN", r.token},
      // plrun serves the store for the whole job: rank 0 must not serve it (it may exit first).
      {"PL_USE_AGENT_STORE", "1"},
      // Each round of workers (a restart) has its own keys in that store.
      {"PL_STORE_PREFIX", a.store_prefix},
      {"PL_RESTART_COUNT", std::to_string(a.round)},
      // torchrun's names, for programs written for it.
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(a.restarts)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.run_id},
  };
  for (const auto& [name, value] : o.trainer_flags) {
    // devices="usable[:N]" was resolved once, here: the workers get the list.  Probing again, each
    // would find the devices its siblings had just taken busy.
    if (name == "DEVICES" && pl::is_usable_devices_text(value)) {
      std::string list;
      for (int id : c.devices) list += (list.empty() ? "" : ", ") + std::to_string(id);
      common.emplace_back("PL_TRAINER_" + name, "[" + list + "]");
      continue;
    }
    // An elastic job's node count is the round's.
    common.emplace_back("PL_TRAINER_" + name, name == "NUM_NODES" ? std::to_string(c.num_nodes) : value);
  }
  if (!o.plugin_path.empty()) common.emplace_back("PL_PLUGIN_PATH", o.plugin_path);
  if (o.progress_bar_columns > 0) common.emplace_back(kBarTtyVariable, std::to_string(o.progress_bar_columns));

  std::vector<WorkerSpec> out;
  const std::string node = std::to_string(o.node_rank);
  switch (c.launch_mode) {
    case PL_LAUNCH_PROCESS_PER_DEVICE:
      for (int local = 0; local < ppn; ++local) {
        const std::string rank = std::to_string(o.node_rank * ppn + local);
        WorkerSpec w{"rank " + rank, "[rank " + rank + "] ", false, common, "", ""};
        w.env.emplace_back("RANK", rank);
        w.env.emplace_back("LOCAL_RANK", std::to_string(local));
        out.push_back(std::move(w));
      }
      break;
    case PL_LAUNCH_SPAWN: {
      // The program starts the node's LOCAL_WORLD_SIZE workers itself (ddp_spawn): it has no rank.
      WorkerSpec w{"node " + node, "[node " + node + "] ", true, common, "", ""};
      w.env.emplace_back("PL_LAUNCH_MODE", "spawn");
      out.push_back(std::move(w));
      break;
    }
    case PL_LAUNCH_SINGLE_PROCESS: {
      // One process drives all of this node's devices: it is the node's only rank.
      WorkerSpec w{"node " + node, "[node " + node + "] ", true, common, "", ""};
      w.env.emplace_back("RANK", std::to_string(o.node_rank * ppn));
      w.env.emplace_back("LOCAL_RANK", "0");
      out.push_back(std::move(w));
      break;
    }
    default:
      invalid("the strategy '" + c.strategy + "' asked for launch mode " + std::to_string(c.launch_mode) +
              ", which plrun does not know");
  }
  if (o.log_dir)
    for (auto& w : out) {
      // "rank 3" -> "3", "node 1" -> "node1"
      const std::string who = w.node_level ? "node" + node : w.label.substr(w.label.find(' ') + 1);
      const std::string folder = worker_log_folder(*o.log_dir, o.run_id, a.round, who);
      w.stdout_log = folder + "/stdout.log";
      w.stderr_log = folder + "/stderr.log";
    }
  return out;
}

const std::vector<std::string>& managed_variables() {
  static const std::vector<std::string> names = {"RANK",
                                                 "LOCAL_RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_WORLD_SIZE",
                                                 "NODE_RANK",
                                                 "GROUP_RANK",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "PL_JOB_TOKEN",
                                                 "PL_USE_AGENT_STORE",
                                                 "PL_STORE_PREFIX",
                                                 "PL_RESTART_COUNT",
                                                 "TORCHELASTIC_RESTART_COUNT",
                                                 "TORCHELASTIC_MAX_RESTARTS",
                                                 "TORCHELASTIC_RUN_ID",
                                                 "PL_LAUNCH_MODE",
                                                 kBarTtyVariable,  // only when plrun's stderr is a terminal
                                                 "PL_TRAINER_ACCELERATOR",
                                                 "PL_TRAINER_DEVICES",
                                                 "PL_TRAINER_STRATEGY",
                                                 "PL_TRAINER_NUM_NODES",
                                                 "PL_TRAINER_PRECISION",
                                                 "PL_TRAINER_PROCESS_GROUP_BACKEND",
                                                 "PL_TRAINER_STRATEGY_OPTIONS"};
  return names;
}

std::vector<std::string> worker_environment(char* const* parent, const EnvList& env) {
  std::set<std::string> drop(managed_variables().begin(), managed_variables().end());
  for (const auto& kv : env) drop.insert(kv.first);
  std::vector<std::string> out;
  for (char* const* e = parent; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    std::string name = eq ? std::string(*e, static_cast<size_t>(eq - *e)) : std::string(*e);
    if (!drop.count(name)) out.emplace_back(*e);
  }
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::string random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw pl::Error(PL_ERR_RESOURCE, std::string("cannot make a job token: getrandom: ") + std::strerror(errno) +
                                           " (set PL_JOB_TOKEN instead)");
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

}  // namespace plrt::launcher
