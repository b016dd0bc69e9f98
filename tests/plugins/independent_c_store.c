/*
 * independent_c's agree_skip, reduce and all_gather: through the rendezvous store, since it has no
 * process group (see independent_c.c).  Plain C99.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "independent_c.h"

/* Every rank's `bytes` (in rank order, into all[r], each `sizes[r]` long) through the store.
 * all[r] owned by the caller, freed with bytes_free. */
static PL_Error* exchange(PL_Strategy* s, const void* bytes, size_t size, PL_Bytes* all) {
  char key[96];
  int32_t r;
  PL_Error* e;
  const PL_StoreApi* st = s->host->store_api;
  const int64_t n = s->exchange++;
  snprintf(key, sizeof key, "independent_c/%lld/%d", (long long)n, (int)s->rank);
  e = st->set(s->store, key, bytes, size);
  if (e != NULL) return e;
  for (r = 0; r < s->world_size; ++r) {
    snprintf(key, sizeof key, "independent_c/%lld/%d", (long long)n, (int)r);
    all[r].struct_size = sizeof all[r];
    e = st->get(s->store, key, s->timeout_ms, &all[r]);
    if (e != NULL) {
      while (r-- > 0) st->bytes_free(&all[r]);
      return e;
    }
  }
  return NULL;
}

PL_Error* ic_agree_skip(PL_Strategy* s, int32_t found_inf, int32_t* out_skip) {
  int32_t mine = s->skip_always || found_inf != 0, r;
  s->agree_calls++;
  *out_skip = mine;
  if (s->world_size > 1 && s->store != NULL) {
    PL_Bytes* all = (PL_Bytes*)calloc((size_t)s->world_size, sizeof *all);
    PL_Error* e;
    if (all == NULL) return ic_fail(s, PL_ERR_RESOURCE, IC_NAME ": out of memory");
    e = exchange(s, &mine, sizeof mine, all);
    if (e != NULL) {
      free(all);
      return e;
    }
    for (r = 0; r < s->world_size; ++r) {
      int32_t theirs = 0;
      if (all[r].size == sizeof theirs) memcpy(&theirs, all[r].data, sizeof theirs);
      if (theirs) *out_skip = 1;
      s->host->store_api->bytes_free(&all[r]);
    }
    free(all);
  }
  if (*out_skip) s->skips++;
  return NULL;
}

static PL_Error* check_host_memory(PL_Strategy* s, const PL_Tensor* t, const char* what) {
  char msg[200];
  if (t->device.type == PL_DEVICE_CPU || s->world_size <= 1) return NULL;
  snprintf(msg, sizeof msg, IC_NAME ": %s takes host memory across processes; got a tensor on device type %d", what,
           (int)t->device.type);
  return ic_fail(s, PL_ERR_UNSUPPORTED, msg);
}

#define IC_REDUCE_LOOP(T)                       \
  do {                                          \
    T* acc = (T*)out;                           \
    const T* x = (const T*)in;                  \
    for (j = 0; j < numel; ++j) {               \
      if (op == PL_REDUCE_MIN)                  \
        acc[j] = x[j] < acc[j] ? x[j] : acc[j]; \
      else if (op == PL_REDUCE_MAX)             \
        acc[j] = x[j] > acc[j] ? x[j] : acc[j]; \
      else if (op == PL_REDUCE_PRODUCT)         \
        acc[j] = (T)(acc[j] * x[j]);            \
      else                                      \
        acc[j] = (T)(acc[j] + x[j]);            \
    }                                           \
  } while (0)

static void combine(PL_DType dtype, PL_ReduceOp op, void* out, const void* in, int64_t numel) {
  int64_t j;
  switch (dtype) {
    case PL_F64:
      IC_REDUCE_LOOP(double);
      break;
    case PL_F32:
      IC_REDUCE_LOOP(float);
      break;
    case PL_I64:
      IC_REDUCE_LOOP(int64_t);
      break;
    default:
      IC_REDUCE_LOOP(int32_t);
      break;
  }
}

PL_Error* ic_reduce(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op) {
  char msg[200];
  size_t bytes;
  int32_t r;
  int64_t j;
  PL_Bytes* all;
  PL_Error* e;
  if (tensor == NULL) return ic_fail(s, PL_ERR_INVALID_ARGUMENT, IC_NAME ": reduce needs a tensor");
  if (op < PL_REDUCE_SUM || op > PL_REDUCE_PRODUCT) {
    snprintf(msg, sizeof msg, IC_NAME ": reduce op %d is not valid (1 sum, 2 avg, 3 min, 4 max, 5 product)", (int)op);
    return ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  if (tensor->dtype != PL_F64 && tensor->dtype != PL_F32 && tensor->dtype != PL_I64 && tensor->dtype != PL_I32) {
    snprintf(msg, sizeof msg, IC_NAME ": reduce takes f64, f32, i64 or i32; got dtype %d", (int)tensor->dtype);
    return ic_fail(s, PL_ERR_UNSUPPORTED, msg);
  }
  s->reduce_calls++;
  if (s->world_size <= 1 || s->store == NULL) return NULL; /* alone: the identity */
  if ((e = check_host_memory(s, tensor, "reduce")) != NULL) return e;
  bytes = (size_t)tensor->numel * pl_dtype_size(tensor->dtype);
  all = (PL_Bytes*)calloc((size_t)s->world_size, sizeof *all);
  if (all == NULL) return ic_fail(s, PL_ERR_RESOURCE, IC_NAME ": out of memory");
  e = exchange(s, tensor->data, bytes, all);
  if (e != NULL) {
    free(all);
    return e;
  }
  for (r = 0; r < s->world_size && e == NULL; ++r)
    if (all[r].size != bytes) {
      snprintf(msg, sizeof msg, IC_NAME ": reduce: rank %d sent %zu bytes, this rank %zu", (int)r, all[r].size, bytes);
      e = ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
    }
  if (e == NULL) {
    /* Rank order from rank 0's values: the same bits on every rank. */
    memcpy(tensor->data, all[0].data, bytes);
    for (r = 1; r < s->world_size; ++r) combine(tensor->dtype, op, tensor->data, all[r].data, tensor->numel);
    if (op == PL_REDUCE_AVG) {
      for (j = 0; j < tensor->numel; ++j) {
        if (tensor->dtype == PL_F64)
          ((double*)tensor->data)[j] /= s->world_size;
        else if (tensor->dtype == PL_F32)
          ((float*)tensor->data)[j] /= (float)s->world_size;
        else if (tensor->dtype == PL_I64)
          ((int64_t*)tensor->data)[j] /= s->world_size;
        else
          ((int32_t*)tensor->data)[j] /= s->world_size;
      }
    }
  }
  for (r = 0; r < s->world_size; ++r) s->host->store_api->bytes_free(&all[r]);
  free(all);
  return e;
}

PL_Error* ic_all_gather(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs) {
  char msg[200];
  int32_t r;
  PL_Bytes* all;
  PL_Error* e;
  const int32_t world = s->world_size > 1 && s->store != NULL ? s->world_size : 1;
  if (input == NULL || (num_outputs > 0 && outputs == NULL))
    return ic_fail(s, PL_ERR_INVALID_ARGUMENT, IC_NAME ": all_gather needs an input and outputs");
  if (num_outputs != (size_t)world) {
    snprintf(msg, sizeof msg, IC_NAME ": all_gather got %zu outputs but the world size is %d", num_outputs, (int)world);
    return ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  s->gather_calls++;
  if ((e = check_host_memory(s, input, "all_gather")) != NULL) return e;
  for (r = 0; r < world; ++r)
    if ((e = check_host_memory(s, &outputs[r], "all_gather")) != NULL) return e;
  if (world == 1) {
    if (outputs[0].numel != input->numel || outputs[0].dtype != input->dtype)
      return ic_fail(s, PL_ERR_INVALID_ARGUMENT,
                     IC_NAME ": all_gather's output differs from its input in size or dtype");
    if (input->device.type != PL_DEVICE_CPU || outputs[0].device.type != PL_DEVICE_CPU)
      return ic_fail(s, PL_ERR_UNSUPPORTED, IC_NAME ": all_gather takes host memory");
    if (outputs[0].data != input->data)
      memcpy(outputs[0].data, input->data, (size_t)input->numel * pl_dtype_size(input->dtype));
    return NULL;
  }
  all = (PL_Bytes*)calloc((size_t)world, sizeof *all);
  if (all == NULL) return ic_fail(s, PL_ERR_RESOURCE, IC_NAME ": out of memory");
  e = exchange(s, input->data, (size_t)input->numel * pl_dtype_size(input->dtype), all);
  if (e != NULL) {
    free(all);
    return e;
  }
  for (r = 0; r < world && e == NULL; ++r) {
    const size_t want = (size_t)outputs[r].numel * pl_dtype_size(outputs[r].dtype);
    if (all[r].size != want) {
      snprintf(msg, sizeof msg, IC_NAME ": all_gather: rank %d sent %zu bytes but outputs[%d] holds %zu", (int)r,
               all[r].size, (int)r, want);
      e = ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
    } else if (want > 0) {
      memcpy(outputs[r].data, all[r].data, want);
    }
  }
  for (r = 0; r < world; ++r) s->host->store_api->bytes_free(&all[r]);
  free(all);
  return e;
}
