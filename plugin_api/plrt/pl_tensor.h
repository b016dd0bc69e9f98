/*
 * plrt plugin ABI: devices and the buffer/tensor descriptor.  Plain C99.
 * A PL_Tensor describes memory; it never owns it.  Conversions to and from DLPack live in the SDK.
 */
#ifndef PLRT_PL_TENSOR_H_
#define PLRT_PL_TENSOR_H_

#include "pl_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t PL_DType;
enum {
  PL_DTYPE_INVALID = 0,
  PL_F32 = 1,
  PL_F64 = 2,
  PL_F16 = 3,  /* IEEE 754 binary16 */
  PL_BF16 = 4, /* bfloat16: the upper 16 bits of an f32 */
  PL_I32 = 5,
  PL_I64 = 6,
  PL_U8 = 7
};
#define PL_DTYPE_COUNT 8

typedef int32_t PL_DeviceType;
enum {
  PL_DEVICE_CPU = 1,
  PL_DEVICE_CUDA = 2
};

typedef struct PL_Device {
  PL_DeviceType type;
  int32_t index; /* 0-based, within the devices this process can see */
} PL_Device;

#define PL_MAX_DIMS 8

typedef struct PL_Tensor {
  size_t struct_size;
  void* data; /* borrowed: the caller owns the memory; contiguous, row-major */
  PL_DType dtype;
  PL_Device device;           /* where `data` lives */
  int64_t numel;              /* element count; the product of shape[0..ndim) */
  int32_t ndim;               /* 0..PL_MAX_DIMS; 0 = a scalar (numel 1) or a flat buffer (numel any) */
  int64_t shape[PL_MAX_DIMS]; /* inline, so a descriptor owns no other memory */
} PL_Tensor;

/* Bytes per element of `dtype`, 0 for an unknown dtype. */
static inline size_t pl_dtype_size(PL_DType dtype) {
  switch (dtype) {
    case PL_F32:
    case PL_I32:
      return 4;
    case PL_F64:
    case PL_I64:
      return 8;
    case PL_F16:
    case PL_BF16:
      return 2;
    case PL_U8:
      return 1;
    default:
      return 0;
  }
}

/* Name of `dtype` as PyTorch spells it ("float32", "bfloat16", ...), "invalid" otherwise. */
static inline const char* pl_dtype_name(PL_DType dtype) {
  switch (dtype) {
    case PL_F32:
      return "float32";
    case PL_F64:
      return "float64";
    case PL_F16:
      return "float16";
    case PL_BF16:
      return "bfloat16";
    case PL_I32:
      return "int32";
    case PL_I64:
      return "int64";
    case PL_U8:
      return "uint8";
    default:
      return "invalid";
  }
}

/* Describes the contiguous row-major tensor of `ndim` dimensions `shape` (borrowed; may be NULL
 * when ndim == 0) at `data` (borrowed: the caller keeps owning it) on `device`: sets every field,
 * struct_size to this header's sizeof(PL_Tensor), numel to the product of the shape (1 for
 * ndim == 0: a scalar) and the unused shape entries to 0.  Returns PL_ERR_OK, or
 * PL_ERR_INVALID_ARGUMENT when t is NULL, ndim is outside [0, PL_MAX_DIMS], shape is NULL with
 * ndim > 0, an extent is negative, or numel would not fit in int64_t; *t (when not NULL) is then
 * an empty descriptor (dtype PL_DTYPE_INVALID, data NULL, numel 0), which every kernel refuses.
 * A flat buffer of n elements is ndim 1, shape {n}.  Header-only: nothing crosses the ABI. */
static inline PL_ErrorCode pl_tensor_init(PL_Tensor* t, void* data, PL_DType dtype, PL_Device device, int32_t ndim,
                                          const int64_t* shape) {
  int64_t numel = 1;
  int32_t i;
  int ok = 1;
  if (t == NULL) return PL_ERR_INVALID_ARGUMENT;
  if (ndim < 0 || ndim > PL_MAX_DIMS || (ndim > 0 && shape == NULL)) ok = 0;
  for (i = 0; ok && i < ndim; ++i) {
    if (shape[i] < 0 || (shape[i] > 0 && numel > INT64_MAX / shape[i]))
      ok = 0;
    else
      numel *= shape[i];
  }
  t->struct_size = sizeof(PL_Tensor);
  t->data = ok ? data : NULL;
  t->dtype = ok ? dtype : PL_DTYPE_INVALID;
  t->device = device;
  t->numel = ok ? numel : 0;
  t->ndim = ok ? ndim : 0;
  for (i = 0; i < PL_MAX_DIMS; ++i) t->shape[i] = (ok && i < ndim) ? shape[i] : 0;
  return ok ? PL_ERR_OK : PL_ERR_INVALID_ARGUMENT;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_TENSOR_H_ */
