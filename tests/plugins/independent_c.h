/*
 * independent_c's internals, shared by its two sources: independent_c.c (the table, options,
 * optimizer_step, state) and independent_c_store.c (agree_skip, reduce and all_gather through the
 * rendezvous store).  A test plugin; see independent_c.c.
 */
#ifndef PLRT_TEST_INDEPENDENT_C_H_
#define PLRT_TEST_INDEPENDENT_C_H_

#include <plrt/pl_plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef IC_ABI_1_3
#define IC_NAME "independent_c13"
#else
#define IC_NAME "independent_c"
#endif

enum {
  STEP_WHOLE = 0,
  STEP_FIRST_HALF = 1,
  STEP_FROZEN = 2,
  STEP_BAD_INDEX = 3,
  STEP_NONE = 4,
  STEP_TWICE = 5
};

struct PL_Strategy {
  const PL_Host* host;
  double grad_scale;
  double lr_scale; /* option lr_scale: asked of the host in bind_optimizer (ABI 1.7); 0 = nothing */
  int32_t sync_enabled;
  int32_t rank, world_size;
  PL_Store* store; /* borrowed from create; NULL alone */
  int64_t timeout_ms;
  int step_mode;
  int skip_always;
  int32_t fail_save_rank;
  int64_t fail_save_after;
  PL_Parameter* params; /* borrowed from setup until teardown */
  size_t num_params;
  int64_t steps; /* run_step calls */
  int64_t optimizer_steps, ranges_stepped, agree_calls, skips, reduce_calls, gather_calls, restored;
  int64_t exchange; /* store exchanges so far: the key of the next one */
};

/* An error of `code` with `message` (copied), made by the host. */
PL_Error* ic_fail(const PL_Strategy* s, PL_ErrorCode code, const char* message);

/* ABI 1.4, in independent_c_store.c */
PL_Error* ic_agree_skip(PL_Strategy* s, int32_t found_inf, int32_t* out_skip);
PL_Error* ic_reduce(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op);
PL_Error* ic_all_gather(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs);

#endif /* PLRT_TEST_INDEPENDENT_C_H_ */
