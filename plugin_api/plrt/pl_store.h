/*
 * plrt plugin ABI: the rendezvous key-value store, as the host offers it to plugins.  Plain C99.
 * Semantics of PyTorch's TCPStore.  The runtime serves and connects it; plugins use it through
 * PL_Host.store_api with the PL_Store* their config hands them (e.g. to pass NCCL's unique id).
 */
#ifndef PLRT_PL_STORE_H_
#define PLRT_PL_STORE_H_

#include "pl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PL_Store PL_Store; /* opaque; owned by the runtime */

/* A key with a meaning for the whole job: the launcher (plrun) sets it, in the store of a round of
 * the job, when one of the round's processes has ended (whatever its code) or stopped, e.g.
 * "rank 1 (pid 4242, node 0) exited with code 0".  It is set once, by the first such event.  A
 * process still waiting on a peer once it exists waits for nothing: the runtime's get and wait
 * fail with its text after at most a second, and a process group should fail a collective still
 * running (plrt's gloo and nccl read it when they probe a slow operation, about once a second).
 * Plugins read it, never set it. */
#define PL_STORE_JOB_ENDED_KEY "plrt/job_ended"

typedef struct PL_Bytes {
  size_t struct_size;
  void* data; /* owned by the host: free with PL_StoreApi.bytes_free */
  size_t size;
} PL_Bytes;

typedef struct PL_StoreApi {
  size_t struct_size;
  /* All REQUIRED.  timeout_ms <= 0 means the store's own timeout. */
  PL_Error* (*set)(PL_Store* store, const char* key, const void* value, size_t size);
  /* Waits until `key` exists, then returns its value in *out. */
  PL_Error* (*get)(PL_Store* store, const char* key, int64_t timeout_ms, PL_Bytes* out);
  /* Atomically adds `delta` to the integer counter `key` (created as 0); *out_value = new value. */
  PL_Error* (*add)(PL_Store* store, const char* key, int64_t delta, int64_t* out_value);
  /* Sets `key` to `desired` if its value equals `expected` (or it is absent and expected_size is 0);
   * *out_current receives the value after the call. */
  PL_Error* (*compare_set)(PL_Store* store, const char* key, const void* expected, size_t expected_size,
                           const void* desired, size_t desired_size, PL_Bytes* out_current);
  PL_Error* (*remove)(PL_Store* store, const char* key, int32_t* out_removed);
  PL_Error* (*check)(PL_Store* store, const char* const* keys, size_t num_keys, int32_t* out_all_exist);
  PL_Error* (*wait)(PL_Store* store, const char* const* keys, size_t num_keys, int64_t timeout_ms);
  PL_Error* (*num_keys)(PL_Store* store, int64_t* out_count);
  void (*bytes_free)(PL_Bytes* bytes);
} PL_StoreApi;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_STORE_H_ */
