// AVG on integer tensors, with the semantics of the gloo plugin (plugins/process_groups/common/
// reduce.hpp): uint8 and int32 are widened to int64 before the sum, so no sum overflows; the result
// is the sum divided by the world size rounded toward zero.  int64 sums wrap like SUM.  NCCL's own
// ncclAvg is used for the floating-point dtypes.
#include <cstdint>

#include "int_avg.hpp"

namespace plrt::nccl {
namespace {

template <class T>
__global__ void widen_kernel(const T* __restrict__ src, int64_t* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<int64_t>(src[i]);
}

template <class T>
// src and dst may alias (int64 in place).
__global__ void narrow_kernel(const int64_t* src, int64_t divisor, T* dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<T>(src[i] / divisor);  // C++ division rounds toward zero
}

unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

}  // namespace

cudaError_t widen_to_i64(const void* src, PL_DType dtype, int64_t* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (dtype == PL_U8)
    widen_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const uint8_t*>(src), dst, n);
  else if (dtype == PL_I32)
    widen_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const int32_t*>(src), dst, n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t narrow_avg_from_i64(const int64_t* src, int64_t divisor, PL_DType dtype, void* dst, size_t n,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (dtype == PL_U8)
    narrow_kernel<<<blocks_for(n), 256, 0, stream>>>(src, divisor, static_cast<uint8_t*>(dst), n);
  else if (dtype == PL_I32)
    narrow_kernel<<<blocks_for(n), 256, 0, stream>>>(src, divisor, static_cast<int32_t*>(dst), n);
  else if (dtype == PL_I64)
    narrow_kernel<<<blocks_for(n), 256, 0, stream>>>(src, divisor, static_cast<int64_t*>(dst), n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace plrt::nccl
