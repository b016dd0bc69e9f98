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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_TENSOR_H_ */
