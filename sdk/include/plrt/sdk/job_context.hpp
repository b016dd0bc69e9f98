// pl::JobContext: this process's place in a launched job, without a strategy: the knobs (and
// plrun's PL_TRAINER_* variables over them), the launcher's rank and world size, the runtime, the
// accelerator and this process's device, and the job's rendezvous store.  pl::GradientSync makes
// one for itself; a program that drives several strategies or collectives of its own (plrt::torch:
// one DistributedDataParallel per module, all_reduce on its tensors) shares one between them.
#pragma once

#include <plrt/pl_strategy.h>

#include <memory>
#include <plrt/sdk/gradient_sync.hpp>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>

namespace pl {

class JobContext {
 public:
  // Resolves the job from `options` (accelerator, devices, strategy, num_nodes,
  // process_group_backend, strategy_options, accelerator_options, timeout, read_env, cluster,
  // runtime), finds this process's place in it, selects its device and connects the store.  Bad
  // knobs, or a launcher that disagrees with them: pl::Error (PL_ERR_INVALID_ARGUMENT), before any
  // work.  Strategies that spawn their own workers or drive several devices from one process are
  // refused by name (the model is the program's).
  explicit JobContext(GradientSyncOptions options = {});
  ~JobContext();
  JobContext(const JobContext&) = delete;
  JobContext& operator=(const JobContext&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  int local_world_size() const;
  int node_rank() const;
  PL_Device device() const;  // cpu: {PL_DEVICE_CPU, 0}; cuda: cuda:<device of this local rank>
  const JobConfig& job() const;
  const std::string& launcher() const;         // "plrun", "torchrun", "slurm", ..., "none"
  const GradientSyncOptions& options() const;  // after plrun's overrides
  const Runtime& runtime() const;

  // A process group of this job (the job's backend: nccl on cuda, gloo otherwise) under its own
  // name in the store; made by the first call for `name` (a collective: every rank calls it in the
  // same order), the same group afterwards.  Null for a job of one process.
  std::shared_ptr<ProcessGroup> process_group(const std::string& name);

  struct Impl;
  Impl& impl() { return *impl_; }  // for pl::GradientSync (sdk/src/job_context_impl.hpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pl
