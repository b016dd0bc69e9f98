#include "launcher.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <plrt/sdk/store.hpp>

#include "guard.hpp"
#include "job_rounds.hpp"
#include "rendezvous.hpp"
#include "supervisor.hpp"
#include "worker_process.hpp"

extern char** environ;

namespace plrt::launcher {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// Another node: connects to node 0's store, which may come up later than this node (up to
// kConnectTimeout), trying a second at a time so that a signal ends the wait.  Returns the signal,
// or 0 with `store` connected.  A refused token is final.
constexpr std::chrono::seconds kConnectTimeout{300};

int connect_to_node_zero(const pl::Runtime& rt, const Rendezvous& rdv, SignalChannel& signals,
                         std::optional<pl::Store>& store) {
  pl::StoreOptions so;
  so.host = rdv.master_addr;
  so.port = rdv.master_port;
  so.token = rdv.token;
  so.key_prefix = "";
  const auto until = std::chrono::steady_clock::now() + kConnectTimeout;
  for (;;) {
    if (int sig = signals.take()) return sig;
    try {
      so.timeout = std::chrono::milliseconds(1000);
      { pl::Store probe(rt, so); }
      so.timeout = std::chrono::milliseconds(30'000);  // each request from now on
      store.emplace(rt, so);
      return 0;
    } catch (const pl::Error& e) {
      const std::string what = e.what();
      const bool refused = what.find("refused the job token") != std::string::npos;
      if (refused || std::chrono::steady_clock::now() >= until)
        throw pl::Error(refused ? PL_ERR_INVALID_ARGUMENT : PL_ERR_RUNTIME,
                        "cannot reach the job's store, which node 0's plrun serves at " + rdv.master_addr + ":" +
                            std::to_string(rdv.master_port) + " (--master-addr, --master-port): " + what);
    }
  }
}

}  // namespace

int launch(const LaunchRequest& req) {
  // First, before the runtime or the store starts a thread: plrun splits into its guard (this pid,
  // back here with the job's code when all is over) and the supervisor (see guard.hpp), which sets
  // up its signal handling (see SignalChannel).
  const GuardSplit split = start_guard();
  if (split.guard_exit) return *split.guard_exit;
  SignalChannel signals(split.guard);

  if (req.command.empty()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "no program to launch");
  if (req.job.assume_device_count >= 0)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--assume-device-count " + std::to_string(req.job.assume_device_count) +
                                                 " only checks a configuration (with --dry-run); it cannot launch one");
  // The checks that need no plugin first: a flag or token problem is reported as such.
  Rendezvous rdv = plan_rendezvous(req.options, env("PL_JOB_TOKEN"), random_token);
  const std::string program = find_program(req.command[0], env("PATH"));

  pl::RuntimeOptions ro;
  ro.plugin_dirs = req.plugin_dirs;
  pl::Runtime rt(ro);
  pl::JobRequest job = req.job;
  job.num_nodes = req.options.num_nodes;
  const pl::JobConfig config = rt.resolve(job);

  // Node 0 serves the store for the whole job, so that it outlives every worker (rank 0 may end
  // first) and every round of workers; the workers learn so from PL_USE_AGENT_STORE=1.  The other
  // nodes' plrun use it too, to agree on the rounds.  Destroyed after the workers ended.
  std::optional<pl::Store> store;
  if (rdv.serve_store) {
    pl::StoreOptions so;
    so.host = rdv.master_addr;
    so.port = rdv.master_port;
    so.is_server = true;
    so.token = rdv.token;
    so.key_prefix = "";
    try {
      store.emplace(rt, so);
    } catch (const pl::Error& e) {
      throw pl::Error(e.code(), "cannot serve the job's store on " + rdv.master_addr + ":" +
                                    std::to_string(rdv.master_port) + " (--master-addr, --master-port): " + e.what());
    }
    rdv.master_port = store->port();
  } else {
    int sig = connect_to_node_zero(rt, rdv, signals, store);
    if (sig) return 128 + sig;
  }

  // Every node must describe the same job: node 0 publishes its run id and node count, the others
  // compare before they start anything (a node of another job is refused, exit 2, and the running
  // job is unaffected).
  const bool is_elastic = elastic(req.options);
  const std::string job_text = "--run-id '" + req.options.run_id + "', --num-nodes " +
                               (is_elastic ? std::to_string(req.options.min_nodes) + ":" : std::string()) +
                               std::to_string(config.num_nodes);
  if (rdv.serve_store) {
    store->set("plrun/job", job_text);
  } else {
    const std::string theirs = store->get("plrun/job", std::chrono::seconds(30));
    if (theirs != job_text)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "node 0's plrun at " + rdv.master_addr + ":" +
                                                   std::to_string(rdv.master_port) + " runs a job with " + theirs +
                                                   "; this node was started with " + job_text +
                                                   ": give every node the same flags");
  }

  RoundsOptions rounds_options;
  rounds_options.node_rank = req.options.node_rank;
  rounds_options.num_nodes = config.num_nodes;
  rounds_options.max_restarts = req.options.max_restarts;
  rounds_options.exit_barrier =
      std::chrono::milliseconds(static_cast<long long>(req.options.exit_barrier_timeout_s * 1000));
  rounds_options.elastic = is_elastic;
  rounds_options.host = rdv.serve_store;
  rounds_options.heartbeat = std::chrono::milliseconds(static_cast<long long>(req.options.rdzv_heartbeat_s * 1000));
  JobRounds rounds(*store, rounds_options);
  std::optional<ElasticRendezvous> rendezvous;
  if (is_elastic) {
    ElasticOptions eo;
    eo.host = rdv.serve_store;
    eo.min_nodes = req.options.min_nodes;
    eo.max_nodes = req.options.num_nodes;
    eo.last_call = std::chrono::milliseconds(static_cast<long long>(req.options.rdzv_last_call_s * 1000));
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    eo.id = std::string(host) + ":" + std::to_string(::getpid());
    rendezvous.emplace(*store, eo);
  }

  SupervisorOptions so;
  so.grace = std::chrono::milliseconds(static_cast<long long>(req.options.grace_period_s * 1000));
  so.on_event = [&rounds](const WorkerEvent& ev, bool stopping) { rounds.on_worker_event(ev, stopping); };
  so.stop_fd = rounds.stop_fd();
  so.progress_bar = req.options.progress_bar_columns > 0;
  for (;;) {
    pl::JobConfig round_config = config;
    LaunchOptions round_options = req.options;
    if (rendezvous) {  // the round's members decide the node ranks and the world size
      int sig = 0;
      const auto m = rendezvous->join(rounds.round(), signals, &sig);
      if (!m) return 128 + sig;
      rounds.set_membership(*m);
      job.num_nodes = m->num_nodes;
      round_config = rt.resolve(job);
      round_options.node_rank = m->node_rank;
      round_options.num_nodes = m->num_nodes;
      std::string ids;
      for (const auto& id : m->ids) ids += (ids.empty() ? "" : ", ") + id;
      rt.log(PL_LOG_INFO, "plrun: round " + std::to_string(m->round) + ": " + std::to_string(m->num_nodes) +
                              " node(s) (" + ids + "), world size " + std::to_string(round_config.world_size) +
                              "; this node is node " + std::to_string(m->node_rank));
    }
    Attempt attempt{rounds.round(), rounds.restarts(), rounds.worker_prefix()};
    std::vector<Launch> launches;
    for (auto& spec : plan_workers(round_config, round_options, rdv, attempt)) {
      ExecImage image{program, req.command, worker_environment(environ, spec.env)};
      launches.push_back({std::move(spec), std::move(image)});
    }
    std::string round_text;
    if (req.options.max_restarts > 0 || is_elastic)
      round_text = ", round " + std::to_string(attempt.round) + ", restarts " + std::to_string(attempt.restarts) +
                   " of " + std::to_string(req.options.max_restarts);
    rt.log(PL_LOG_INFO, "plrun: node " + std::to_string(round_options.node_rank) + " of " +
                            std::to_string(round_config.num_nodes) + ": starting " + std::to_string(launches.size()) +
                            " process(es) of a world of " + std::to_string(round_config.world_size) + " (strategy " +
                            config.strategy + ", launch " + pl::launch_mode_name(config.launch_mode) + ", store " +
                            rdv.master_addr + ":" + std::to_string(rdv.master_port) + round_text + ")");
    rounds.begin_round();
    const SuperviseResult result = supervise_round(std::move(launches), signals, so);
    const RoundOutcome next = rounds.finish_round(result, signals);
    if (next.next == RoundOutcome::Next::restart) continue;
    if (next.next == RoundOutcome::Next::finished) return result.code;
    return next.code;
  }
}

}  // namespace plrt::launcher
