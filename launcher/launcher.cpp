#include "launcher.hpp"

#include <cstdlib>
#include <optional>
#include <plrt/sdk/store.hpp>

#include "exit_barrier.hpp"
#include "guard.hpp"
#include "supervisor.hpp"
#include "worker_process.hpp"

extern char** environ;

namespace plrt::launcher {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
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
  // first); the workers learn so from PL_USE_AGENT_STORE=1.  Destroyed after the workers ended.
  std::optional<pl::Store> store;
  if (rdv.serve_store) {
    pl::StoreOptions so;
    so.host = rdv.master_addr;
    so.port = rdv.master_port;
    so.is_server = true;
    so.token = rdv.token;
    try {
      store.emplace(rt, so);
    } catch (const pl::Error& e) {
      throw pl::Error(e.code(), "cannot serve the job's store on " + rdv.master_addr + ":" +
                                    std::to_string(rdv.master_port) + " (--master-addr, --master-port): " + e.what());
    }
    rdv.master_port = store->port();
  }

  std::vector<Launch> launches;
  for (auto& spec : plan_workers(config, req.options, rdv)) {
    ExecImage image{program, req.command, worker_environment(environ, spec.env)};
    launches.push_back({std::move(spec), std::move(image)});
  }
  rt.log(PL_LOG_INFO, "plrun: node " + std::to_string(req.options.node_rank) + " of " +
                          std::to_string(config.num_nodes) + ": starting " + std::to_string(launches.size()) +
                          " process(es) of a world of " + std::to_string(config.world_size) + " (strategy " +
                          config.strategy + ", launch " + pl::launch_mode_name(config.launch_mode) + ", store " +
                          rdv.master_addr + ":" + std::to_string(rdv.master_port) + ")");

  SupervisorOptions so;
  so.grace = std::chrono::milliseconds(static_cast<long long>(req.options.grace_period_s * 1000));
  int code = supervise(std::move(launches), signals, so);
  if (code != 0 || config.num_nodes == 1) return code;
  // Every node's workers succeeded here: keep node 0's store up until the others are done too.
  const auto barrier = std::chrono::milliseconds(static_cast<long long>(req.options.exit_barrier_timeout_s * 1000));
  if (store) return exit_barrier_serve(*store, config.num_nodes, signals, barrier);
  return exit_barrier_report(rt, rdv, signals, std::min(barrier, std::chrono::milliseconds(5000)));
}

}  // namespace plrt::launcher
