// Device kernels for AVG on integer tensors (see int_avg.cu for the semantics).
#pragma once

#include <cuda_runtime_api.h>
#include <plrt/pl_tensor.h>

#include <cstddef>
#include <cstdint>

namespace plrt::nccl {

// dst[i] = src[i] as int64; src is uint8 or int32.  Enqueued on `stream`.
cudaError_t widen_to_i64(const void* src, PL_DType dtype, int64_t* dst, size_t n, cudaStream_t stream);
// dst[i] = src[i] / divisor (toward zero), as `dtype` (uint8, int32 or int64; dst may be src for int64).
cudaError_t narrow_avg_from_i64(const int64_t* src, int64_t divisor, PL_DType dtype, void* dst, size_t n,
                                cudaStream_t stream);

}  // namespace plrt::nccl
