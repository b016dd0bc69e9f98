/*
 * plrt plugin ABI: versioning, errors, options.  Plain C99.
 *
 * VERSION RULES (the contract between the runtime, "the host", and every plugin)
 *
 *  1. The MAJOR version is part of every entry symbol's name (pl_plugin_entry_v1).  A change that
 *     breaks an existing field, its meaning, or a function signature makes a new major version and
 *     a new entry symbol.  The host probes entry symbols newest to oldest.
 *  2. MINOR versions only append: new fields go at the end of a struct or function table, never
 *     in the middle; nothing is removed or reordered.
 *  3. Every struct and function table crossing the boundary begins with `size_t struct_size`,
 *     set by whoever fills the struct to sizeof() as that side was compiled.  Neither side reads
 *     a field that lies past the struct_size the other side declared: use PL_HAS_FIELD().
 *  4. A struct that the callee fills (an "out" struct) has its struct_size set by the caller to
 *     its own sizeof(); the callee writes min(that, its own size) bytes and sets struct_size to
 *     the number written.  A struct_size below the v1 size is a PL_ERR_VERSION error.
 *  5. A function-table entry that a plugin does not provide is NULL; the host reports a clear
 *     "not supported" error.  Entries marked REQUIRED must be non-NULL.
 *  6. A minor version may give a meaning to a value that earlier minors declared invalid (a NULL
 *     out pointer, say).  A caller uses it only with a plugin whose PL_Plugin.abi_minor is at least
 *     the minor that introduced it; with an older plugin it falls back to the old way.
 *  7. Instance pointers (PL_Accelerator*, PL_Strategy*, ...) handed to a table's functions must
 *     not be NULL: without an instance there is no host to report the error through.
 *  8. A plugin may declare a newer minor than the host's (it was built against newer headers).
 *     The host loads it, with a warning that names the file and both versions: the host reads
 *     only the fields it knows, which the newer structs still carry (rule 2).  By rule 3 such a
 *     plugin checks PL_Host.abi_minor and PL_HAS_FIELD before it uses anything added after the
 *     host's minor, and its entry refuses (PL_ERR_VERSION, through host->error_new) a host that
 *     lacks something it cannot do without; the host then reports that refusal, naming the file.
 *  Checked in CI against stored baselines (abi/, scripts/abi-check; docs/abi.md).
 *
 * HISTORY
 *  1.0  the first contract.
 *  1.1  process-group collectives accept out == NULL: a blocking call (see pl_process_group.h).
 *  1.2  accelerators: the layers' math (gemm, add_bias, sum_rows, relu, relu_backward,
 *       cross_entropy, argmax_rows); strategies: get_stat.
 *  1.3  mixed precision and several replicas per process: accelerators' gemm, add_bias, sum_rows,
 *       relu and relu_backward take f16/bf16, and unscale_check is appended; strategies append
 *       num_replicas and setup_replica (dp, ddp2).
 *  1.4  the seat of sharded and compressed strategies: process groups append all_to_all;
 *       accelerators append pack / unpack (a bucket's gradients in one launch) and device_status
 *       (which devices a job could take now: devices="usable:N"); strategies append
 *       optimizer_step, agree_skip, reduce, all_gather, state_info, save_state and load_state,
 *       and PL_Parameter appends `kind` (parameter, frozen parameter, buffer).
 *  1.5  sharded optimizer state (ZeRO): strategies append owned_ranges (the element ranges whose
 *       gradient and optimizer state this rank holds); accelerators append sum_squares and clamp
 *       (gradient clipping by norm and by value over those ranges).
 *  1.6  optimizers that communicate their first moment (bagua's qadam): strategies append
 *       bind_optimizer (the host names its optimizer and its hyperparameters before the first
 *       step, and the strategy may ask it to put its first moment into the gradients);
 *       PL_AdamParams appends freeze_exp_avg_sq and grad_is_exp_avg (QAdam's update);
 *       PL_StrategyStateInfo appends local_optimizer_state (each rank's optimizer state saved
 *       and resumed per rank: decentralized training); strategies append
 *       sync_weights (make every rank's weights equal now and keep them so until the next step:
 *       bagua's async model average, whose background thread lets them drift).
 *  1.7  strategies that change the optimizer's setting (horovod): PL_OptimizerInfo appends
 *       lr_scale (the host multiplies the learning rate by it in a run that starts from scratch)
 *       and broadcast_optimizer_state (the host makes its optimizer state rank 0's before the
 *       first step).
 *
 * ERRORS
 *  Every fallible call returns PL_Error* : NULL on success, otherwise an error object.  Error
 *  objects are created by the host (PL_Host.error_new) and owned by whoever receives them, who
 *  frees them with PL_Host.error_destroy (plugins) or pl_error_destroy (host programs).
 *  No C++ exception ever crosses the boundary: C++ plugins catch everything at each exported
 *  function and turn it into a PL_Error.
 *
 * OWNERSHIP is stated on every pointer field:
 *  - "borrowed": the callee may read it during the call only (or, for async work, until the work
 *     handle completes); the caller keeps ownership.
 *  - "static": owned by the plugin, valid while the plugin library stays loaded.
 *  - "owned by X": X frees it, with the function named there.
 */
#ifndef PLRT_PL_ABI_H_
#define PLRT_PL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PL_ABI_MAJOR 1
#define PL_ABI_MINOR 7

#if defined(_WIN32)
#define PL_EXPORT __declspec(dllexport)
#else
#define PL_EXPORT __attribute__((visibility("default")))
#endif

/* Size of `type` up to and including `field`: the minimum struct_size that carries `field`. */
#define PL_STRUCT_SIZE(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))
/* True when the struct pointed to by `ptr` (declaring ptr->struct_size) carries `field`. */
#define PL_HAS_FIELD(type, ptr, field) ((ptr)->struct_size >= PL_STRUCT_SIZE(type, field))

/* ---- errors ----------------------------------------------------------------------------- */

typedef int32_t PL_ErrorCode;
enum {
  PL_ERR_OK = 0,
  PL_ERR_INVALID_ARGUMENT = 1, /* a bad value from the caller; the message names it */
  PL_ERR_NOT_FOUND = 2,        /* a name or file that matches nothing */
  PL_ERR_UNSUPPORTED = 3,      /* an optional entry the plugin lacks, or a dtype a kernel does not
                                  implement (a tensor on the wrong device is INVALID_ARGUMENT) */
  PL_ERR_VERSION = 4,          /* ABI version or struct size mismatch */
  PL_ERR_TIMEOUT = 5,          /* a wait or collective exceeded its timeout */
  PL_ERR_RUNTIME = 6,          /* an operation failed (device, network, peer) */
  PL_ERR_RESOURCE = 7,         /* out of memory or another resource */
  PL_ERR_INTERNAL = 8          /* a bug: an exception caught at the boundary, a broken invariant */
};

/* Opaque; created by the host, freed by whoever receives it. */
typedef struct PL_Error PL_Error;

/* ---- options: string key/value pairs (plugin settings and alias presets) --------------- */

typedef struct PL_Option {
  size_t struct_size;
  const char* key;   /* borrowed (or static, inside a PL_Alias) */
  const char* value; /* borrowed (or static, inside a PL_Alias) */
} PL_Option;

typedef struct PL_OptionList {
  size_t struct_size;
  const PL_Option* items; /* borrowed; `count` entries; may be NULL when count == 0 */
  size_t count;
} PL_OptionList;

/* ---- plugin kinds ----------------------------------------------------------------------- */

typedef int32_t PL_PluginKind;
enum {
  PL_PLUGIN_ACCELERATOR = 1,
  PL_PLUGIN_PROCESS_GROUP = 2,
  PL_PLUGIN_STRATEGY = 3
};

/* ---- log levels (the same names as spdlog and PL_LOG_LEVEL) ----------------------------- */

typedef int32_t PL_LogLevel;
enum {
  PL_LOG_TRACE = 0,
  PL_LOG_DEBUG = 1,
  PL_LOG_INFO = 2,
  PL_LOG_WARN = 3,
  PL_LOG_ERROR = 4,
  PL_LOG_CRITICAL = 5,
  PL_LOG_OFF = 6
};

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_ABI_H_ */
