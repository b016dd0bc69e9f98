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
 *
 * ABI 1.4, at the accumulation boundary (each entry optional, with the host's fallback):
 *   before_optimizer_step()
 *   unscale (16-mixed) → agree_skip(found_inf)   -- every rank skips or steps together
 *   optimizer_step(fn)                           -- the strategy picks the element ranges fn
 *                                                   updates, then shares the results
 *   after_optimizer_step()
 * Metrics go through reduce / all_gather, so a strategy orders them with its own communication.
 * A strategy keeps per-rank state in checkpoints through state_info / save_state / load_state.
 *
 * ABI 1.5, sharded optimizer state (ZeRO, ddp_sharded): a strategy with owned_ranges says which
 * element ranges this rank holds.  The host then keeps optimizer state for those ranges only,
 * unscales, checks and clips only those ranges' gradients (a gradient norm is the square root of
 * the sum over ranks of each rank's sum of squares, which the host adds with reduce(SUM)), and
 * writes its optimizer state to one file per rank in checkpoints, resharding on load.
 *
 * ABI 1.6, replicas that drift apart (bagua's async model average: a background thread averages
 * the weights while each rank trains at its own pace): the host calls sync_weights on every rank,
 * between steps, before it reads the weights as the model's (before validation and test, before a
 * checkpoint is saved, at the end of fit); the strategy pauses whatever changes them behind the
 * host's back and makes them equal on every rank.
 *
 * ABI 1.7: bind_optimizer's info carries two requests back to the host: lr_scale (horovod's
 * learning rate times the world size) and broadcast_optimizer_state (rank 0's optimizer state).
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
  int32_t needs_process_group;     /* nonzero when the strategy communicates across processes */
  int32_t max_devices_per_process; /* 0: no limit; 1 for single_device */
} PL_LaunchInfo;

/* ABI 1.4: what an entry of setup's array is.  A host of minor < 4 sends no `kind`: read it with
 * pl_parameter_kind(), which derives it from requires_grad as 1.3 did. */
typedef int32_t PL_ParamKind;
enum {
  PL_PARAM_TRAINABLE = 1, /* a parameter with requires_grad 1: has a gradient, the optimizer steps it */
  PL_PARAM_FROZEN = 2,    /* a parameter with requires_grad 0: no gradient, never stepped; its value
                             changes only if the host changes it (so ddp broadcasts it at setup only) */
  PL_PARAM_BUFFER = 3     /* not a parameter (running statistics, counters): requires_grad 0; ddp
                             broadcasts rank 0's buffers before every step (broadcast_buffers) */
};

typedef struct PL_Parameter {
  size_t struct_size;
  const char* name; /* borrowed until teardown; PyTorch-style dotted name */
  PL_Tensor value;  /* memory borrowed until teardown (owned by the host's module) */
  PL_Tensor grad;   /* same shape and dtype as value; memory borrowed until teardown */
  int32_t requires_grad;
  /* ---- ABI 1.4 ---- */
  PL_ParamKind kind; /* TRAINABLE iff requires_grad; FROZEN or BUFFER otherwise */
} PL_Parameter;

/* The kind of `p`: its `kind` when the host sent one (struct_size carries it and it is nonzero),
 * else what a 1.3 host meant: requires_grad 1 = trainable, 0 = buffer. */
static inline PL_ParamKind pl_parameter_kind(const PL_Parameter* p) {
  if (PL_HAS_FIELD(PL_Parameter, p, kind) && p->kind != 0) return p->kind;
  return p->requires_grad ? PL_PARAM_TRAINABLE : PL_PARAM_BUFFER;
}

typedef struct PL_StrategyConfig {
  size_t struct_size;
  int32_t global_rank;
  int32_t world_size; /* processes in the job */
  int32_t local_rank;
  int32_t local_world_size;
  int32_t node_rank;
  int32_t num_nodes;
  const PL_AcceleratorApi* accelerator_api; /* borrowed; outlives the strategy */
  PL_Accelerator* accelerator;              /* borrowed; outlives the strategy */
  const int32_t* device_ids;                /* borrowed for the call; the devices this process drives */
  size_t num_devices;
  const char* process_group_backend; /* borrowed for the call; a name for PL_Host.find_plugin */
  PL_Store* store;                   /* borrowed; outlives the strategy; NULL for one process */
  int64_t timeout_ms;                /* <= 0: PL_DEFAULT_TIMEOUT_MS */
  PL_OptionList options;             /* borrowed for the call: alias presets, then the user's */
} PL_StrategyConfig;

/* The trainer's forward+backward for one replica, handed to run_step. */
typedef struct PL_ReplicaStepFn {
  size_t struct_size;
  void* user; /* borrowed; handed back to `run` */
  /* Runs forward and backward of replica `replica` (of `num_replicas`, each taking its slice of
   * the batch) on `device`, writing the gradients of `params` (borrowed for the call).  May be
   * called from several threads at once, one per replica. */
  PL_Error* (*run)(void* user, int32_t replica, int32_t num_replicas, PL_Device device, PL_Parameter* params,
                   size_t num_params);
} PL_ReplicaStepFn;

/* ABI 1.4: elements [begin, end) of params[param_index] (of setup's array), counted in the flat
 * value; the same range of its gradient and of the optimizer's state for it. */
typedef struct PL_ParamRange {
  size_t struct_size;
  size_t param_index;
  int64_t begin;
  int64_t end; /* begin <= end <= the parameter's numel */
} PL_ParamRange;

/* ABI 1.4: the host's optimizer, handed to optimizer_step. */
typedef struct PL_OptimizerFn {
  size_t struct_size;
  void* user; /* borrowed; handed back to `step` */
  /* Updates the values in `ranges` (borrowed for the call; trainable parameters, no two
   * overlapping) from their gradients, with the optimizer's rule and its state for those elements
   * (created at the first step that names them).  Parameters and elements not named are left
   * alone.  The host keys its state by range: a strategy names the same ranges at every step. */
  PL_Error* (*step)(void* user, const PL_ParamRange* ranges, size_t num_ranges);
} PL_OptimizerFn;

/* ABI 1.4: what a strategy keeps in checkpoints (see save_state). */
typedef struct PL_StrategyStateInfo {
  size_t struct_size;
  int32_t has_state;      /* nonzero: save_state writes files and load_state reads them */
  int32_t any_world_size; /* nonzero: state saved at one world size loads at another (resharding) */
  /* ---- ABI 1.6 ---- */
  /* nonzero: the host's optimizer state differs per rank (the gradients are not averaged: bagua's
   * decentralized algorithms), so the host saves each rank's whole optimizer state in a file of its
   * own and, at the same world size, each rank resumes from its own (at another, from rank 0's). */
  int32_t local_optimizer_state;
} PL_StrategyStateInfo;

/* ABI 1.6: the host's optimizer, told to the strategy by bind_optimizer.  The host zeroes the
 * struct, fills the inputs and sets struct_size to its own sizeof. */
typedef struct PL_OptimizerInfo {
  size_t struct_size;
  const char* name;              /* borrowed for the call: "SGD", "Adam", "AdamW", "QAdam", or a user's */
  PL_OptionList hyperparameters; /* borrowed for the call: name=value text, e.g. beta1=0.9, warmup_steps=100 */
  int64_t steps;                 /* optimizer steps already taken (nonzero in a resumed run) */
  /* OUT, written by the strategy (the host zeroes it): nonzero asks the optimizer to communicate
   * its first moment.  The optimizer must support it (QAdam; the host refuses another with an error
   * naming it): once it has taken its warmup_steps, at every accumulation boundary the host writes
   * m_i = beta1*m + (1-beta1)*(g + weight_decay*x) (times the loss scale, which the unscale then
   * removes) into each parameter's gradient BEFORE it calls on_grad_ready for it (and into any not
   * reported before after_backward), so the strategy averages the m_i; the optimizer's step then
   * takes the gradient as its new first moment (PL_AdamParams.grad_is_exp_avg) with its second
   * moment frozen. */
  int32_t first_moment_in_grads;
  /* ---- ABI 1.7: OUT, written by the strategy (the host zeroes them) ---- */
  /* The factor the host multiplies its optimizer's learning rate by (every param group's), once,
   * when the run starts from scratch (steps == 0), saying so in one log line on rank 0; a resumed
   * run keeps the learning rate its checkpoint saved (already multiplied), and says so when the
   * factor is not 1.  0 or 1: unchanged.  Horovod's scale_lr asks for the world size. */
  double lr_scale;
  /* Why, in words, for that log line (e.g. "the world size 4 (option scale_lr=false keeps the
   * configured rate)"); owned by the strategy instance, valid until its destroy; may be NULL. */
  const char* lr_scale_reason;
  /* Nonzero: before the first step the host makes its optimizer state (tensors and scalars, the
   * learning rate among them) rank 0's on every rank, as Horovod's broadcast_optimizer_state does,
   * and applies lr_scale after it.  A collective: every rank's host does it at the same point. */
  int32_t broadcast_optimizer_state;
} PL_OptimizerInfo;

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
  PL_Error* (*process_group)(PL_Strategy* strategy, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group);

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

  /* ---- ABI 1.4 (optional) ---- */
  /* Takes the optimizer step (at the accumulation boundary, after after_backward, the loss
   * scaler's unscale and agree_skip; not called on a skipped step; between before_ and
   * after_optimizer_step).  The strategy calls fn->step exactly once, with the ranges this rank
   * updates (ddp: every trainable parameter whole; a sharded strategy: its shard; possibly none),
   * then makes the values the same on every rank again (a sharded strategy gathers the shards).
   * fn borrowed for the call.  NULL: the host steps every trainable parameter itself. */
  PL_Error* (*optimizer_step)(PL_Strategy* strategy, const PL_OptimizerFn* fn);
  /* The mixed-precision loss scaler's verdict, agreed: `found_inf` is this rank's (nonzero when one
   * of the gradients it checked was inf or NaN); *out_skip becomes nonzero when any rank's was, so
   * that every rank skips the step together or steps together.  Ordered with the strategy's own
   * communication.  NULL: the host takes the maximum over process_group() itself (alone: its own). */
  PL_Error* (*agree_skip)(PL_Strategy* strategy, int32_t found_inf, int32_t* out_skip);
  /* Metric reductions (Lightning's Strategy.reduce and all_gather): log(sync_dist=True), the
   * epoch aggregation, LightningModule::all_gather.  Blocking; every rank calls them in the same
   * order; the strategy orders them with its own communication (never in the middle of its bucket
   * reductions) and bounds them by its timeout.  Tensors are borrowed for the call, in host memory
   * or on the strategy's device.  reduce: `tensor` becomes op over every process's tensor, in
   * place.  all_gather: outputs[r] (num_outputs == world size) receives rank r's input; sizes may
   * differ per rank.  NULL: the host calls process_group()'s allreduce / allgather itself. */
  PL_Error* (*reduce)(PL_Strategy* strategy, PL_Tensor* tensor, PL_ReduceOp op);
  PL_Error* (*all_gather)(PL_Strategy* strategy, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs);
  /* Checkpoints.  state_info says whether the strategy keeps state of its own (sharded optimizer
   * state it holds, error-feedback residuals, neighbour replicas) and whether it loads at another
   * world size.  save_state: every rank calls it with the same `dir` (borrowed for the call: an
   * existing folder that the host publishes atomically with the rest of the checkpoint, on a file
   * system every rank sees); each rank writes only files of its own, named
   * "strategy.<anything>.rank<global rank>.<ext>".  load_state: after setup (and setup_replica),
   * before the first step, with the folder and the world size the checkpoint was saved at; a world
   * size it cannot load from is PL_ERR_INVALID_ARGUMENT naming both sizes, a missing or damaged
   * file is PL_ERR_INVALID_ARGUMENT naming the file.  NULL entries: no state. */
  PL_Error* (*state_info)(PL_Strategy* strategy, PL_StrategyStateInfo* out);
  PL_Error* (*save_state)(PL_Strategy* strategy, const char* dir);
  PL_Error* (*load_state)(PL_Strategy* strategy, const char* dir, int32_t saved_world_size);

  /* ---- ABI 1.5 (optional) ---- */
  /* The element ranges this rank owns: exactly the ranges its optimizer_step passes to fn->step,
   * the same from setup until teardown.  Across the ranks of the job the owned ranges PARTITION
   * the trainable elements: each element is owned by exactly one rank.  After after_backward at an
   * accumulation boundary (grad sync on), the gradient elements in the owned ranges hold the
   * averaged gradient; other elements of the gradients are unspecified (a sharded strategy may
   * leave local values there or use the memory as scratch), so the host reads, unscales and clips
   * only owned ranges, and keeps optimizer state only for them.  A strategy with owned_ranges
   * implements optimizer_step and reduce.  Writes min(capacity, count) ranges to `out` (each
   * out[i].struct_size set by the caller, rule 4) and sets *out_count to the count, so a caller
   * may ask with capacity 0 first.  Called after setup.  NULL: no sharding; every rank holds the
   * whole averaged gradient and steps every trainable parameter whole. */
  PL_Error* (*owned_ranges)(PL_Strategy* strategy, PL_ParamRange* out, size_t capacity, size_t* out_count);

  /* ---- ABI 1.6 (optional) ---- */
  /* The host's optimizer (`info` borrowed for the call; its inputs read, first_moment_in_grads
   * written): called once after setup (and setup_replica and load_state), before the first step.
   * A strategy that needs a particular optimizer refuses another here, with PL_ERR_INVALID_ARGUMENT
   * naming both (bagua's qadam needs QAdam): before any work.  NULL: the strategy works with any
   * optimizer and asks nothing of it. */
  PL_Error* (*bind_optimizer)(PL_Strategy* strategy, PL_OptimizerInfo* info);
  /* Makes the trainable values equal on every rank now, and leaves them unchanged until the next
   * run_step (a strategy that averages weights in the background stops doing so, then averages
   * them once, synchronously).  A collective: every rank calls it at the same point, between
   * steps (after after_optimizer_step, never inside run_step); blocking, bounded by the strategy's
   * timeout.  The host calls it before validation and test, before a checkpoint is saved and at
   * the end of fit, so that what it evaluates, saves and hands back is one model.  NULL: the
   * ranks' weights never drift apart (ddp), nothing to do. */
  PL_Error* (*sync_weights)(PL_Strategy* strategy);
} PL_StrategyApi;

#define PL_STRATEGY_API_MIN_SIZE PL_STRUCT_SIZE(PL_StrategyApi, teardown)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_STRATEGY_H_ */
