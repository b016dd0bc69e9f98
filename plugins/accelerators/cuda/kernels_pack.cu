// pack / unpack (ABI 1.4): a bucket's tensors gathered into one flat buffer or scattered back, in
// one launch per up to kPackBatch parts (a bucket has far fewer).  The parts' addresses travel in
// the kernel's parameters (CUDA 12.1+ takes up to 32 KiB of them on sm_70 and newer), so nothing is
// uploaded first and the caller's descriptor array is free as soon as the launch returns.
//
// Grid: blockIdx.y picks the part; the x blocks stride over its bytes, 16 at a time where source,
// destination and size allow (cudaMalloc'd buffers and dtype-sized offsets usually do), else 4, else
// 1.  Bytes are bytes: the copy is the same for every dtype.
#include <algorithm>

#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

struct PackBatch {
  const unsigned char* src[kPackBatch];
  unsigned char* dst[kPackBatch];
  unsigned long long bytes[kPackBatch];
};

template <class W>
__device__ void copy_words(unsigned char* dst, const unsigned char* src, unsigned long long n) {
  const unsigned long long words = n / sizeof(W);
  const auto* s = reinterpret_cast<const W*>(src);
  auto* d = reinterpret_cast<W*>(dst);
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<unsigned long long>(gridDim.x) * blockDim.x)
    d[i] = s[i];
}

__global__ void pack_kernel(const __grid_constant__ PackBatch batch) {
  const unsigned part = blockIdx.y;
  const unsigned char* src = batch.src[part];
  unsigned char* dst = batch.dst[part];
  const unsigned long long n = batch.bytes[part];
  const auto bits = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | n;
  if ((bits & 15u) == 0)
    copy_words<uint4>(dst, src, n);
  else if ((bits & 3u) == 0)
    copy_words<uint32_t>(dst, src, n);
  else
    copy_words<unsigned char>(dst, src, n);
}

}  // namespace

void launch_pack(const Launch& L, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets,
                 const PL_Tensor& flat, bool unpack) {
  const size_t elem = pl_dtype_size(flat.dtype);
  auto* base = static_cast<unsigned char*>(flat.data);
  for (size_t first = 0; first < num_parts; first += kPackBatch) {
    const size_t count = std::min<size_t>(kPackBatch, num_parts - first);
    PackBatch b{};
    unsigned long long largest = 0;
    for (size_t k = 0; k < count; ++k) {
      const PL_Tensor& p = parts[first + k];
      unsigned char* slice = base + static_cast<size_t>(offsets[first + k]) * elem;
      auto* data = static_cast<unsigned char*>(p.data);
      b.src[k] = unpack ? slice : data;
      b.dst[k] = unpack ? data : slice;
      b.bytes[k] = static_cast<unsigned long long>(p.numel) * elem;
      largest = std::max(largest, b.bytes[k]);
    }
    if (largest == 0) continue;
    // Enough blocks for the largest part at 16 bytes a thread, at most 4 waves of the SMs.
    const unsigned long long per_block = static_cast<unsigned long long>(dev::kThreads) * 16u;
    const unsigned long long want = (largest + per_block - 1) / per_block;
    const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(want, 4ull * L.sm_count));
    pack_kernel<<<dim3(std::max(1u, blocks), static_cast<unsigned>(count)), dev::kThreads, 0, L.stream>>>(b);
    check_launch(unpack ? "unpack" : "pack");
  }
}

}  // namespace plrt::cuda
