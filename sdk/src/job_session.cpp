// JobSession: knobs → runtime → job → place in the launcher's job → accelerator, device, store →
// the strategy's set-up; shared by every driver (job_session.hpp).
#include "job_session.hpp"

#include <cerrno>
#include <cstdlib>
#include <plrt/sdk/options.hpp>

#include "job_setup.hpp"

namespace plrt::sdk {

using pl::Error;

void apply_knob_env(pl::JobRequest& req) {
  auto str = [](const char* var, std::string& field) {
    if (const char* v = std::getenv(var); v && *v) field = v;
  };
  str("PL_TRAINER_ACCELERATOR", req.accelerator);
  if (const char* v = std::getenv("PL_TRAINER_DEVICES"); v && *v) req.devices = pl::Devices::from_text(v);
  str("PL_TRAINER_STRATEGY", req.strategy);
  if (const char* v = std::getenv("PL_TRAINER_NUM_NODES"); v && *v) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 1000000 || errno == ERANGE)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  std::string("PL_TRAINER_NUM_NODES='") + v + "' is not valid: it must be an integer 1..1000000");
    req.num_nodes = static_cast<int>(n);
  }
  str("PL_TRAINER_PRECISION", req.precision);
  str("PL_TRAINER_PROCESS_GROUP_BACKEND", req.process_group_backend);
  if (const char* v = std::getenv(pl::kStrategyOptionsVariable); v && *v)
    for (const auto& [key, value] : pl::decode_options(pl::kStrategyOptionsVariable, v))
      pl::set_option(req.strategy_options, key, value);
}

void JobSession::start_runtime(pl::RuntimeOptions ro) {
  if (ro.rank < 0 && env.source != "none" && !env.spawn_parent) ro.rank = env.rank;
  rt = std::make_shared<pl::Runtime>(ro);
}

pl::JobConfig JobSession::resolve_for_launcher(const pl::JobRequest& req) const {
  pl::JobConfig first = rt->resolve(req);  // launch_info checks the strategy's options now, before any work
  if (first.strategy_plugin != "horovod" || first.launch_mode != PL_LAUNCH_PROCESS_PER_DEVICE || env.source == "none" ||
      env.spawn_parent || env.world_size == first.world_size)
    return first;
  const int local = env.local_world_size;
  const std::string launched_by = " (launched by " + env.source + ")";
  if (local < 1 || env.world_size % local != 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "strategy '" + first.strategy + "' takes its world size from the launcher" + launched_by +
                    ", which started WORLD_SIZE=" + std::to_string(env.world_size) +
                    " with LOCAL_WORLD_SIZE=" + std::to_string(local) + ": start the same number on every node");
  pl::JobRequest again = req;
  again.devices = local;
  again.num_nodes = env.world_size / local;
  const PL_DeviceSpec asked = req.devices.spec();
  const bool automatic = (asked.kind == PL_DEVICES_STRING || asked.kind == PL_DEVICES_TEXT) &&
                         std::string(asked.string ? asked.string : "") == "auto";
  // a warning only where the knobs asked for something else than one device per process
  const bool devices_differ = !automatic && first.processes_per_node > 1 && first.processes_per_node != local;
  const bool nodes_differ = req.num_nodes > 1 && req.num_nodes != again.num_nodes;
  if (env.rank == 0 && (devices_differ || nodes_differ))
    rt->log(PL_LOG_WARN,
            "strategy '" + first.strategy + "' takes its world size from the launcher" + launched_by +
                ": WORLD_SIZE=" + std::to_string(env.world_size) + ", " + std::to_string(local) +
                " process(es) per node, one device each; devices=" + std::to_string(first.processes_per_node) +
                " x num_nodes=" + std::to_string(req.num_nodes) + " = " + std::to_string(first.world_size) +
                " is ignored (Lightning's HorovodStrategy does the same)");
  return rt->resolve(again);
}

void JobSession::resolve(const pl::JobRequest& req, Driver driver) {
  job = resolve_for_launcher(req);
  const bool trainer = driver == Driver::Trainer;
  const std::string launched_by = env.source == "none" ? "" : " (launched by " + env.source + ")";
  auto refuse = [&](const std::string& why) {
    throw Error(PL_ERR_INVALID_ARGUMENT, "strategy '" + job.strategy + "' " + why);
  };
  switch (job.launch_mode) {
    case PL_LAUNCH_PROCESS_PER_DEVICE:
      if (env.source == "none" || env.spawn_parent) {
        if (job.world_size > 1)
          refuse("runs one process per device (" + std::to_string(job.world_size) +
                 " processes) and needs a launcher: run `plrun --strategy " + job.strategy + " --devices " +
                 std::to_string(job.processes_per_node) + " -- <program>` (or torchrun, srun, mpirun)" +
                 (trainer ? ", or use strategy 'ddp_spawn', which starts the workers from fit()" : ""));
        break;
      }
      if (env.world_size != job.world_size)
        throw Error(PL_ERR_INVALID_ARGUMENT,
                    "the launcher started WORLD_SIZE=" + std::to_string(env.world_size) + " processes" + launched_by +
                        " but the " + (trainer ? "trainer" : "job") + " asks for " +
                        std::to_string(job.processes_per_node) + " device(s) x " + std::to_string(job.num_nodes) +
                        " node(s) = " + std::to_string(job.world_size) +
                        "; make --devices/--num-nodes agree with the launcher");
      rank = env.rank, world = env.world_size, local_rank = env.local_rank, local_world = env.local_world_size;
      node_rank = env.node_rank;
      break;
    case PL_LAUNCH_SPAWN:
      if (!trainer)
        refuse(
            "spawns its workers from pl::Trainer::fit; a program with its own model starts them with a launcher: "
            "`plrun --strategy ddp --devices N -- <program>`");
      if (env.source != "none" && !env.spawn_parent)
        refuse("starts its own workers, but this process is already one of " + std::to_string(env.world_size) +
               launched_by + "; use strategy 'ddp'");
      if (env.spawn_parent && env.world_size != job.world_size)
        throw Error(PL_ERR_INVALID_ARGUMENT, "plrun asked for WORLD_SIZE=" + std::to_string(env.world_size) +
                                                 " but the trainer computes " + std::to_string(job.world_size));
      world = job.world_size, local_world = job.processes_per_node, node_rank = env.spawn_parent ? env.node_rank : 0;
      break;
    default:  // one process per node
      if (!trainer && job.devices.size() > 1)
        refuse("drives " + std::to_string(job.devices.size()) +
               " devices from one process with a copy of the module on each, which a program with its own model "
               "cannot hand over; use one process per device (strategy ddp under plrun)");
      if (job.world_size > 1 && env.world_size != job.world_size)
        refuse("runs one process per node (" + std::to_string(job.world_size) +
               " processes for num_nodes=" + std::to_string(job.num_nodes) + ") but " +
               (env.source == "none" ? std::string("no launcher started this one: run `plrun --strategy ") +
                                           job.strategy + " --num-nodes " + std::to_string(job.num_nodes) +
                                           " --node-rank <n> ... -- <program>` on each node (or srun, torchrun)"
                                     : "the launcher started " + std::to_string(env.world_size) + launched_by));
      if (job.world_size > 1) rank = env.rank, world = env.world_size, node_rank = env.node_rank;
      break;
  }
}

void JobSession::open(const OpenOptions& o) {
  acc = pl::Accelerator(*rt, job.accelerator, with_cpu_threads(o.accelerator_options, job.accelerator, o.cpu_sharers));
  acc.keep_alive(rt);  // the module's tensors may outlive the driver
  if (job.device_type == PL_DEVICE_CPU) {
    device = {PL_DEVICE_CPU, 0};
  } else {
    const int idx = job.devices.empty() ? 0 : job.devices[static_cast<size_t>(local_rank) % job.devices.size()];
    device = {job.device_type, idx};
    acc.set_device(idx);
  }
  if (world > 1) {
    const bool spawned = o.store_port >= 0;
    pl::StoreOptions so;
    so.host = env.master_addr;
    so.port = spawned ? o.store_port : env.master_port;
    so.is_server = rank == 0 && !env.agent_store && !spawned;
    so.token = env.token;
    so.timeout = o.timeout;
    store = open_job_store(*rt, env, so, !spawned);
  }
}

StrategySetup JobSession::strategy_setup(const OptionPairs& strategy_options, std::chrono::milliseconds timeout) const {
  StrategySetup s;
  s.rank = rank, s.world_size = world, s.local_rank = local_rank, s.local_world_size = local_world;
  s.node_rank = node_rank, s.num_nodes = job.num_nodes;
  s.device_ids = {device.index};
  s.process_group_backend = job.process_group_backend;
  s.store = store ? store->get() : nullptr;
  s.timeout_ms = timeout.count();
  s.options = strategy_options;
  return s;
}

}  // namespace plrt::sdk
