// Conversions between plrt's PL_Tensor descriptor and DLPack's DLTensor (Debian's libdlpack-dev,
// DLPack 0.6), so tensors from PyTorch, JAX, CuPy or any DLPack producer flow into plrt and back.
// Both are views: neither conversion copies or owns memory.
#pragma once

#include <dlpack/dlpack.h>

#include <plrt/sdk/error.hpp>
#include <string>

namespace pl {

inline DLDataType to_dlpack_dtype(PL_DType dtype) {
  switch (dtype) {
    case PL_F32:
      return {kDLFloat, 32, 1};
    case PL_F64:
      return {kDLFloat, 64, 1};
    case PL_F16:
      return {kDLFloat, 16, 1};
    case PL_BF16:
      return {kDLBfloat, 16, 1};
    case PL_I32:
      return {kDLInt, 32, 1};
    case PL_I64:
      return {kDLInt, 64, 1};
    case PL_U8:
      return {kDLUInt, 8, 1};
    default:
      throw Error(PL_ERR_INVALID_ARGUMENT, "dtype " + std::to_string(dtype) + " has no DLPack equivalent");
  }
}

inline PL_DType from_dlpack_dtype(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return PL_F32;
    if (t.code == kDLFloat && t.bits == 64) return PL_F64;
    if (t.code == kDLFloat && t.bits == 16) return PL_F16;
    if (t.code == kDLBfloat && t.bits == 16) return PL_BF16;
    if (t.code == kDLInt && t.bits == 32) return PL_I32;
    if (t.code == kDLInt && t.bits == 64) return PL_I64;
    if (t.code == kDLUInt && t.bits == 8) return PL_U8;
  }
  throw Error(PL_ERR_UNSUPPORTED, "DLPack dtype (code " + std::to_string(t.code) + ", bits " + std::to_string(t.bits) +
                                      ", lanes " + std::to_string(t.lanes) +
                                      ") is not one plrt supports; valid: float32, float64, float16, bfloat16, "
                                      "int32, int64, uint8");
}

// A DLTensor view of `t`.  `shape_storage` (PL_MAX_DIMS entries) receives the shape, since a
// DLTensor points to its shape; keep it alive as long as the view.  A flat descriptor (ndim 0,
// numel != 1) becomes a 1-D tensor.
inline DLTensor to_dlpack(const PL_Tensor& t, int64_t* shape_storage) {
  DLTensor d{};
  d.data = t.data;
  switch (t.device.type) {
    case PL_DEVICE_CPU:
      d.device = {kDLCPU, t.device.index};
      break;
    case PL_DEVICE_CUDA:
      d.device = {kDLCUDA, t.device.index};
      break;
    default:
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "device type " + std::to_string(t.device.type) + " has no DLPack equivalent");
  }
  d.dtype = to_dlpack_dtype(t.dtype);
  if (t.ndim < 0 || t.ndim > PL_MAX_DIMS)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "ndim " + std::to_string(t.ndim) + " is outside 0.." + std::to_string(PL_MAX_DIMS));
  if (t.ndim == 0 && t.numel != 1) {
    d.ndim = 1;
    shape_storage[0] = t.numel;
  } else {
    d.ndim = t.ndim;
    for (int i = 0; i < t.ndim; ++i) shape_storage[i] = t.shape[i];
  }
  d.shape = shape_storage;
  d.strides = nullptr;  // compact, row-major
  d.byte_offset = 0;
  return d;
}

// A PL_Tensor view of a DLPack tensor.  It must be compact and row-major (strides NULL or the
// row-major strides), at most PL_MAX_DIMS dimensions, on the CPU or a CUDA device.
inline PL_Tensor from_dlpack(const DLTensor& d) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  if (d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost)
    t.device = {PL_DEVICE_CPU, 0};
  else if (d.device.device_type == kDLCUDA || d.device.device_type == kDLCUDAManaged)
    t.device = {PL_DEVICE_CUDA, d.device.device_id};
  else
    throw Error(PL_ERR_UNSUPPORTED,
                "DLPack device type " + std::to_string(d.device.device_type) +
                    " is not one plrt supports; valid: CPU (1), CUDA (2), CUDA host (3), CUDA managed (13)");
  t.dtype = from_dlpack_dtype(d.dtype);
  if (d.ndim < 0 || d.ndim > PL_MAX_DIMS)
    throw Error(PL_ERR_UNSUPPORTED, "DLPack tensor has " + std::to_string(d.ndim) + " dimensions; plrt takes at most " +
                                        std::to_string(PL_MAX_DIMS));
  t.ndim = d.ndim;
  int64_t numel = 1, expected_stride = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    if (d.shape[i] < 0) throw Error(PL_ERR_INVALID_ARGUMENT, "DLPack shape[" + std::to_string(i) + "] is negative");
    if (d.strides && d.shape[i] > 1 && d.strides[i] != expected_stride)
      throw Error(PL_ERR_UNSUPPORTED, "DLPack tensor is not compact row-major (strides[" + std::to_string(i) +
                                          "] = " + std::to_string(d.strides[i]) + ", expected " +
                                          std::to_string(expected_stride) + "); make it contiguous first");
    expected_stride *= d.shape[i];
    t.shape[i] = d.shape[i];
    numel *= d.shape[i];
  }
  t.numel = numel;
  t.data = static_cast<char*>(d.data) + d.byte_offset;
  return t;
}

}  // namespace pl
