/*
 * plrt plugin ABI: the process-group plugin kind (gloo, nccl).  Plain C99.
 *
 * Collectives are asynchronous: each returns a PL_Work handle at once; PL_Work is waited on with a
 * timeout.  Since ABI 1.1 a caller may pass out == NULL instead: the call then blocks until the
 * operation completes and returns its error (a plugin may run it on the calling thread, which
 * saves the hand-off to a worker thread).  Operations run in the order they are issued; every
 * rank must issue the same collectives in the same order (send/recv excepted).
 *
 * Every plugin numbers its collectives (1, 2, ...) and checks that all ranks issued the same
 * operation, dtype and size at the same number: a mismatch is an error on every rank, naming what
 * each rank called, never a hang or a silent wrong answer.  Every collective and every wait is bounded by a timeout
 * (the group's, default 30 minutes); on timeout the error names the operation, its sequence number and the missing
 * ranks.
 */
#ifndef PLRT_PL_PROCESS_GROUP_H_
#define PLRT_PL_PROCESS_GROUP_H_

#include "pl_abi.h"
#include "pl_accelerator.h"
#include "pl_host.h"
#include "pl_store.h"
#include "pl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PL_ProcessGroup PL_ProcessGroup; /* opaque instance; owned by its creator */
typedef struct PL_Work PL_Work;                 /* opaque; owned by the caller, see work_destroy */

typedef int32_t PL_ReduceOp;
enum {
  PL_REDUCE_SUM = 1,
  PL_REDUCE_AVG = 2, /* integers: the sum divided by world size, rounded toward zero */
  PL_REDUCE_MIN = 3,
  PL_REDUCE_MAX = 4,
  PL_REDUCE_PRODUCT = 5
};

#define PL_DEFAULT_TIMEOUT_MS (30LL * 60LL * 1000LL)

typedef struct PL_ProcessGroupConfig {
  size_t struct_size;
  int32_t rank;
  int32_t world_size;
  PL_Store* store;                          /* borrowed; outlives the group */
  const char* group_name;                   /* borrowed; prefixes this group's store keys */
  int64_t timeout_ms;                       /* <= 0: PL_DEFAULT_TIMEOUT_MS */
  PL_Device device;                         /* where this rank's buffers live */
  const PL_AcceleratorApi* accelerator_api; /* borrowed, may be NULL; for staging copies */
  PL_Accelerator* accelerator;              /* borrowed, may be NULL */
  PL_OptionList options;                    /* borrowed for the call */
} PL_ProcessGroupConfig;

typedef struct PL_ProcessGroupApi {
  size_t struct_size;
  /* ---- lifecycle (REQUIRED) ---- */
  PL_Error* (*create)(const PL_Host* host, const PL_ProcessGroupConfig* config, PL_ProcessGroup** out);
  void (*destroy)(PL_ProcessGroup* pg);

  /* ---- collectives.  Tensors are borrowed until the returned work completes. ---- */
  PL_Error* (*allreduce)(PL_ProcessGroup* pg, PL_Tensor* tensor, PL_ReduceOp op, PL_Work** out);
  PL_Error* (*broadcast)(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t root, PL_Work** out);
  /* outputs[r] receives rank r's input; num_outputs == world size; sizes may differ per rank. */
  PL_Error* (*allgather)(PL_ProcessGroup* pg, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs,
                         PL_Work** out);
  /* output = reduction over ranks of their inputs[rank]; num_inputs == world size. */
  PL_Error* (*reduce_scatter)(PL_ProcessGroup* pg, const PL_Tensor* inputs, size_t num_inputs, PL_Tensor* output,
                              PL_ReduceOp op, PL_Work** out);
  PL_Error* (*barrier)(PL_ProcessGroup* pg, PL_Work** out);
  PL_Error* (*send)(PL_ProcessGroup* pg, const PL_Tensor* tensor, int32_t dst, int32_t tag, PL_Work** out);
  PL_Error* (*recv)(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t src, int32_t tag, PL_Work** out);

  /* ---- work handles ---- */
  /* timeout_ms <= 0: the group's timeout.  Returns the operation's own error, or PL_ERR_TIMEOUT. */
  PL_Error* (*work_wait)(PL_Work* work, int64_t timeout_ms);
  PL_Error* (*work_test)(PL_Work* work, int32_t* out_completed);
  /* Frees the handle; an incomplete operation is waited for first (bounded by the timeout). */
  void (*work_destroy)(PL_Work* work);

  /* ---- control ---- */
  PL_Error* (*set_timeout)(PL_ProcessGroup* pg, int64_t timeout_ms);
  /* Fails every pending and future operation; callable from any thread, e.g. a watchdog. */
  PL_Error* (*abort)(PL_ProcessGroup* pg);

  /* ---- ABI 1.4 (optional; NULL = not supported) ---- */
  /* All-to-all, as torch.distributed.all_to_all_single: `input` is world_size consecutive chunks,
   * chunk j (input_counts[j] elements) going to rank j; `output` receives world_size consecutive
   * chunks, chunk i (output_counts[i] elements) from rank i.  Chunk r of a rank's own input lands
   * in its own output chunk r.  input and output share dtype and device, are flat (any ndim; only
   * numel counts) and must not overlap.  input_counts and output_counts hold world_size entries
   * each (>= 0, summing to input's and output's numel), borrowed until the work completes; NULL
   * means equal chunks: numel / world_size, which must divide exactly.  Peers must agree: rank i's
   * input_counts[j] equals rank j's output_counts[i]; a disagreement is an error on every rank
   * naming both counts, never a hang or a short read.  Every dtype; sequence-numbered, checked and
   * bounded by the timeout like the other collectives. */
  PL_Error* (*all_to_all)(PL_ProcessGroup* pg, const PL_Tensor* input, const int64_t* input_counts, PL_Tensor* output,
                          const int64_t* output_counts, PL_Work** out);
} PL_ProcessGroupApi;

#define PL_PROCESS_GROUP_API_MIN_SIZE PL_STRUCT_SIZE(PL_ProcessGroupApi, abort)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_PROCESS_GROUP_H_ */
