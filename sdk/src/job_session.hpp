// The one set-up path of every driver of a strategy (pl::Trainer, pl::GradientSync and, through
// it, plrt::torch): the Lightning knobs (and plrun's PL_TRAINER_* variables that override them) →
// the runtime → the job (JobConfig) → where this process stands in it (the launcher's rank, world
// size, local rank) → the accelerator and this process's device → the job's store → the
// strategy's set-up (StrategySetup).  Each step's checks and messages live here once.
//
// The strategy handle itself stays with the driver: the strategy borrows the driver's memory (the
// module's tensors, the C views of them) until its teardown, so the driver declares the handle
// after that memory and the session before it (member order is destruction order, reversed).
#pragma once

#include <chrono>
#include <memory>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <utility>
#include <vector>

#include "strategy_handle.hpp"

namespace plrt::sdk {

using OptionPairs = std::vector<std::pair<std::string, std::string>>;

// PL_TRAINER_ACCELERATOR, _DEVICES, _STRATEGY, _NUM_NODES, _PRECISION, _PROCESS_GROUP_BACKEND and
// PL_STRATEGY_OPTIONS (what plrun sets from its command line) over the program's knobs; a bad
// value is pl::Error naming the variable.  plrun's strategy options win over the program's, key by
// key.
void apply_knob_env(pl::JobRequest& req);

// Who drives the strategy: the Trainer starts ddp_spawn's workers itself and drives dp's replicas;
// a program with its own model (GradientSync, plrt::torch) can do neither.
enum class Driver {
  Trainer,
  External
};

struct JobSession {
  pl::ClusterEnv env;
  std::shared_ptr<pl::Runtime> rt;  // shared with the accelerator (Accelerator::keep_alive)
  pl::JobConfig job;
  int rank = 0, world = 1, local_rank = 0, local_world = 1, node_rank = 0;
  pl::Accelerator acc;
  PL_Device device{PL_DEVICE_CPU, 0};
  std::unique_ptr<pl::Store> store;

  // The runtime for this process (its rank from the launcher, unless `ro` sets one).
  void start_runtime(pl::RuntimeOptions ro);
  // The job from `req`, and this process's place in it from the launcher's environment; a launcher
  // that disagrees with the knobs, or a launch mode `driver` cannot drive, is PL_ERR_INVALID_ARGUMENT.
  void resolve(const pl::JobRequest& req, Driver driver);
  // The runtime's resolution of `req` under this process's launcher.  Lightning's horovod rule:
  // a strategy whose plugin is horovod takes its world size from the launcher (horovodrun,
  // mpirun, ...) and gives each process one local device, whatever devices / num_nodes say; rank 0
  // warns when they asked for more than one device per process and the launcher disagrees.
  pl::JobConfig resolve_for_launcher(const pl::JobRequest& req) const;

  struct OpenOptions {
    OptionPairs accelerator_options;  // num_threads is added for cpu (the cores / `cpu_sharers`)
    int cpu_sharers = 1;              // processes or replica threads sharing this host's cores
    std::chrono::milliseconds timeout{0};
    int store_port = -1;  // a ddp_spawn worker: the parent's store (a client, no annotation)
  };
  // The accelerator, this process's device (set current) and, for a job of several processes, the
  // store (rank 0 serves it unless the launcher's agent does).
  void open(const OpenOptions& o);

  // The strategy's set-up for this process: one device (the trainer widens device_ids for dp).
  StrategySetup strategy_setup(const OptionPairs& strategy_options, std::chrono::milliseconds timeout) const;
};

}  // namespace plrt::sdk
