// sum_squares and clamp (ABI 1.5): gradient clipping by norm and by value, with the cpu reference's
// semantics (plugins/accelerators/cpu/kernels.hpp).
//
// sum_squares: out[0] += sum of x[i]^2, every element widened exactly to double and every product
// and sum in double.  Deterministic: each thread adds its grid-stride elements in order, a block
// adds its threads' sums in a fixed tree (warp shuffles, then the warps' sums), and with more than
// one block the blocks' sums go to a stream-ordered scratch array that one block adds up in the same
// fixed way before adding to out.  The grid depends only on the element count and the device, so
// the same data gives the same bits on every call and every rank (ddp's replicas then compute the
// same norm and stay identical).  No atomics.
//
// clamp: element-wise; each bound rounded once from the double to the dtype (as the cpu's
// from_double), elements outside the rounded bounds replaced by them, every other element (NaN
// included) stored back as it was.
#include <algorithm>

#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

constexpr int kWarps = kThreads / 32;

// The sum of v over the block, in a fixed order; the result is valid in thread 0.  Every thread of
// the block must call it.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[kWarps];
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = v + __shfl_down_sync(kFullMask, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp != 0) return 0;
  v = lane < kWarps ? warp_sums[lane] : 0.0;
#pragma unroll
  for (int off = kWarps / 2; off >= 1; off /= 2) v = v + __shfl_down_sync(kFullMask, v, off);
  return v;
}

// Block b's sum of squares to partial[b] (several blocks) or straight into *out (one block).
template <class Tr>
__global__ void __launch_bounds__(kThreads)
    sum_squares_kernel(const typename Tr::S* x, int64_t n, double* partial, double* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  double s = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const double v = static_cast<double>(Tr::load(x[i]));
    s = s + v * v;
  }
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  if (partial != nullptr)
    partial[blockIdx.x] = s;
  else
    *out = *out + s;
}

// One block: *out += the sum of partial[0 .. count).
__global__ void __launch_bounds__(kThreads) sum_partials_kernel(const double* partial, int count, double* out) {
  double s = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) s = s + partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = *out + s;
}

template <class Tr>
struct ClampOp {
  using S = typename Tr::S;
  S* x;
  double lo, hi;
  template <int W>
  __device__ void run(int64_t i) const {
    using C = typename Tr::C;
    const S s_lo = Tr::from_double(lo), s_hi = Tr::from_double(hi);
    const C c_lo = Tr::load(s_lo), c_hi = Tr::load(s_hi);
    Pack<S, W> p = load_pack<W>(x + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const C v = Tr::load(p.v[k]);
      p.v[k] = v < c_lo ? s_lo : v > c_hi ? s_hi : p.v[k];
    }
    store_pack<W>(x + i, p);
  }
};

}  // namespace

void launch_sum_squares(const Launch& L, const PL_Tensor& x, double* out) {
  if (x.numel <= 0) return;
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const unsigned blocks = grid_size<sum_squares_kernel<Tr>>(x.numel, L);
    const S* data = static_cast<const S*>(x.data);
    if (blocks == 1) {
      sum_squares_kernel<Tr><<<1, kThreads, 0, L.stream>>>(data, x.numel, nullptr, out);
      check_launch("sum_squares");
      return;
    }
    void* scratch = nullptr;
    check_cuda(cudaMallocAsync(&scratch, blocks * sizeof(double), L.stream), "sum_squares: cudaMallocAsync");
    auto* partial = static_cast<double*>(scratch);
    sum_squares_kernel<Tr><<<blocks, kThreads, 0, L.stream>>>(data, x.numel, partial, nullptr);
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess) {
      sum_partials_kernel<<<1, kThreads, 0, L.stream>>>(partial, static_cast<int>(blocks), out);
      rc = cudaGetLastError();
    }
    cudaFreeAsync(scratch, L.stream);  // after the kernels, in stream order
    check_cuda(rc, "sum_squares kernel launch");
  });
}

void launch_clamp(const Launch& L, const PL_Tensor& x, double lo, double hi) {
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const ClampOp<Tr> op{static_cast<S*>(x.data), lo, hi};
    launch_apply<pack_width(sizeof(S))>(L, x.numel, aligned(x.data, 16), op, "clamp");
  });
}

}  // namespace plrt::cuda
