/*
 * plrt plugin ABI: the strategy plugin kind (single_device, ddp, ddp_spawn, dp, ddp2, ...).
 * Plain C99.
 *
 * One training step, as the trainer drives it:
 *   run_step(fn)             -- the strategy calls fn once per replica it drives (ddp: once;
 *                               dp: once per local device, in parallel); fn runs forward and
 *                               backward, and calls on_grad_ready as each gradient is final
 *   after_backward()         -- gradients are synchronised when it returns (unless grad sync is off)
 *   before_optimizer_step()  -- the trainer's optimizer updates the parameters
 *   after_optimizer_step()
 *
 * Several replicas per process (ABI 1.3: dp, ddp2).  A strategy whose num_replicas answers n > 1
 * drives one replica of the module per device in config->device_ids: replica 0 is setup's
 * parameters (on device_ids[0], the root), replica r >= 1 the copy the host registers with
 * setup_replica(r) (on device_ids[r]).  Then:
 *   run_step        copies the root's values (parameters and buffers) into every replica when
 *                   they changed since the last copy (after setup, and after
 *                   after_optimizer_step), then calls fn once per replica, concurrently, one
 *                   thread per replica, each thread bound to its device (set_device); it returns
 *                   when all have returned, with the error of the lowest failing replica.
 *   after_backward  adds every replica r >= 1's gradients (requires_grad entries) into the
 *                   root's, then, for a strategy across processes (ddp2) with grad sync on,
 *                   averages the root's gradients across processes.  The host scales each
 *                   replica's contribution (dp's mean is 1/n of each replica's gradient) and
 *                   writes every replica's gradients in full each step (zeros where unused).
 *   The optimizer steps on the root only.  A value a replica writes into its own copy during a
 *   step (a buffer, say) is not kept: the next copy overwrites it.
 */
#ifndef PLRT_PL_STRATEGY_H_
#define PLRT_PL_STRATEGY_H_

#include "pl_abi.h"
#include "pl_accelerator.h"
#include "pl_host.h"
#include "pl_process_group.h"
#include "pl_store.h"
#include "pl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PL_Strategy PL_Strategy; /* opaque instance; owned by its creator */

typedef int32_t PL_LaunchMode;
enum {
  PL_LAUNCH_PROCESS_PER_DEVICE = 1, /* the launcher (plrun, torchrun, SLURM) starts one process per device (ddp) */
  PL_LAUNCH_SPAWN = 2,              /* the trainer itself spawns one process per device (ddp_spawn) */
  PL_LAUNCH_SINGLE_PROCESS = 3      /* one process per node drives all its devices (single_device, dp, ddp2) */
};

typedef struct PL_LaunchInfo {
  size_t struct_size;
  PL_LaunchMode mode;
  int32_t needs_process_group; /* nonzero when the strategy communicates across processes */
  int32_t max_devices_per_process; /* 0: no limit; 1 for single_device */
} PL_LaunchInfo;

typedef struct PL_Parameter {
  size_t struct_size;
  const char* name;   /* borrowed until teardown; PyTorch-style dotted name */
  PL_Tensor value;    /* memory borrowed until teardown (owned by the host's module) */
  PL_Tensor grad;     /* same shape and dtype as value; memory borrowed until teardown */
  int32_t requires_grad;
} PL_Parameter;

typedef struct PL_StrategyConfig {
  size_t struct_size;
  int32_t global_rank;
  int32_t world_size;        /* processes in the job */
  int32_t local_rank;
  int32_t local_world_size;
  int32_t node_rank;
  int32_t num_nodes;
  const PL_AcceleratorApi* accelerator_api; /* borrowed; outlives the strategy */
  PL_Accelerator* accelerator;              /* borrowed; outlives the strategy */
  const int32_t* device_ids;                /* borrowed for the call; the devices this process drives */
  size_t num_devices;
  const char* process_group_backend;        /* borrowed for the call; a name for PL_Host.find_plugin */
  PL_Store* store;                          /* borrowed; outlives the strategy; NULL for one process */
  int64_t timeout_ms;                       /* <= 0: PL_DEFAULT_TIMEOUT_MS */
  PL_OptionList options;                    /* borrowed for the call: alias presets, then the user's */
} PL_StrategyConfig;

/* The trainer's forward+backward for one replica, handed to run_step. */
typedef struct PL_ReplicaStepFn {
  size_t struct_size;
  void* user; /* borrowed; handed back to `run` */
  /* Runs forward and backward of replica `replica` (of `num_replicas`, each taking its slice of
   * the batch) on `device`, writing the gradients of `params` (borrowed for the call).  May be
   * called from several threads at once, one per replica. */
  PL_Error* (*run)(void* user, int32_t replica, int32_t num_replicas, PL_Device device,
                   PL_Parameter* params, size_t num_params);
} PL_ReplicaStepFn;

typedef struct PL_StrategyApi {
  size_t struct_size;
  /* ---- REQUIRED ---- */
  /* How workers must be started, given the options (borrowed for the call).  No instance yet. */
  PL_Error* (*launch_info)(const PL_OptionList* options, PL_LaunchInfo* out);
  PL_Error* (*create)(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out);
  void (*destroy)(PL_Strategy* strategy);
  /* Registers the module's parameters (borrowed until teardown) and makes replicas agree
   * (ddp: rank 0's values are broadcast). */
  PL_Error* (*setup)(PL_Strategy* strategy, PL_Parameter* params, size_t num_params);
  PL_Error* (*run_step)(PL_Strategy* strategy, const PL_ReplicaStepFn* fn);
  PL_Error* (*after_backward)(PL_Strategy* strategy);
  PL_Error* (*teardown)(PL_Strategy* strategy);

  /* ---- optional (NULL = nothing to do) ---- */
  /* Called during backward when params[index]'s gradient is final (ddp starts bucket reduces). */
  PL_Error* (*on_grad_ready)(PL_Strategy* strategy, size_t param_index);
  /* Turns gradient synchronisation off (gradient accumulation, "no_sync") and back on. */
  PL_Error* (*set_grad_sync)(PL_Strategy* strategy, int32_t enabled);
  PL_Error* (*before_optimizer_step)(PL_Strategy* strategy);
  PL_Error* (*after_optimizer_step)(PL_Strategy* strategy);
  /* The group used for metrics (sync_dist, all_gather); both outputs borrowed from the strategy,
   * NULL when it runs alone. */
  PL_Error* (*process_group)(PL_Strategy* strategy, const PL_ProcessGroupApi** out_api,
                             PL_ProcessGroup** out_group);

  /* ---- ABI 1.2 (optional) ---- */
  /* A named statistic of the strategy's work so far (`name` borrowed for the call), e.g. ddp's
   * "allreduce_ms" and "exposed_allreduce_ms".  An unknown name is PL_ERR_NOT_FOUND, listing the
   * known ones. */
  PL_Error* (*get_stat)(PL_Strategy* strategy, const char* name, double* out);

  /* ---- ABI 1.3 (optional; REQUIRED for a strategy that drives several replicas) ---- */
  /* How many replicas run_step drives in this process; a NULL entry means 1. */
  PL_Error* (*num_replicas)(PL_Strategy* strategy, int32_t* out);
  /* Registers replica `replica`'s copy of the module (1 <= replica < num_replicas): the same count,
   * order, names, shapes, dtypes and requires_grad as setup's params, on device_ids[replica];
   * `params` borrowed for the call, their memory borrowed until teardown.  Called after setup,
   * once per replica, before the first run_step; a mismatch is PL_ERR_INVALID_ARGUMENT naming the
   * entry. */
  PL_Error* (*setup_replica)(PL_Strategy* strategy, int32_t replica, PL_Parameter* params, size_t num_params);
} PL_StrategyApi;

#define PL_STRATEGY_API_MIN_SIZE PL_STRUCT_SIZE(PL_StrategyApi, teardown)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_STRATEGY_H_ */
