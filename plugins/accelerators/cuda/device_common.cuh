// Device-side building blocks of the cuda kernels: per-dtype traits (load widens exactly, store
// rounds once to nearest even, as the cpu reference does), aligned packs for 16-byte loads and
// stores, and the grid-stride element-wise kernel with its launcher.
//
// The kernels build with --fmad=false: every operation rounds as written, never fused into a
// multiply-add, so that their element-wise results equal the cpu reference's bit for bit (the cpu
// kernels build with -ffp-contract=off).  They are memory-bound; the FMA would buy nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "check_types.hpp"
#include "cuda_common.hpp"
#include "dtype_dispatch.hpp"

namespace plrt::cuda::dev {

using kernel_args::Case;

constexpr int kThreads = 256;  // threads per block of every kernel here
constexpr unsigned kFullMask = 0xffffffffu;

// ---- float dtypes: storage type S, compute type C, load (exact), store (rounds once) ----

struct F32 {
  using S = float;
  using C = float;
  __device__ static float load(float x) { return x; }
  __device__ static float store(float v) { return v; }
  __device__ static float from_double(double v) { return static_cast<float>(v); }
};
struct F64 {
  using S = double;
  using C = double;
  __device__ static double load(double x) { return x; }
  __device__ static double store(double v) { return v; }
  __device__ static double from_double(double v) { return v; }
};
struct F16 {
  using S = __half;
  using C = float;
  __device__ static float load(__half x) { return __half2float(x); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
  __device__ static __half from_double(double v) { return __double2half(v); }  // one rounding
};
struct BF16 {
  using S = __nv_bfloat16;
  using C = float;
  __device__ static float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
  __device__ static __nv_bfloat16 from_double(double v) { return __double2bfloat16(v); }  // one rounding
};

// Calls f(Traits{}) for a float dtype; the caller has checked that `dtype` is one.  (The traits
// are device code, so they stay here; the dispatch is the shared host template.)
template <class F>
void dispatch_float(PL_DType dtype, F&& f) {
  kernel_args::dispatch<Case<PL_F32, F32>, Case<PL_F64, F64>, Case<PL_F16, F16>, Case<PL_BF16, BF16>>(
      dtype, "cuda dispatch_float", f);
}

// ---- packs: W elements moved by 16-byte (or narrower, naturally aligned) accesses ----

template <class T, int W>
struct alignas(sizeof(T) * W < 16 ? sizeof(T) * W : 16) Pack {
  T v[W];
};

template <int W, class T>
__device__ __forceinline__ Pack<T, W> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, W>*>(p);
}
template <int W, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& v) {
  *reinterpret_cast<Pack<T, W>*>(p) = v;
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Elements per pack for operands whose smallest storage is `min_size` bytes: 16 bytes of the
// narrowest operand, so that every operand moves in whole 16-byte accesses.
constexpr int pack_width(size_t min_size) { return static_cast<int>(16 / min_size); }

// ---- grid sizing: one full wave of resident blocks, grid-stride loops for the rest ----

template <auto Kernel>
int resident_blocks_per_sm() {
  static const int blocks = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, kThreads, 0) != cudaSuccess || b < 1) {
      cudaGetLastError();
      b = 1;
    }
    return b;
  }();
  return blocks;
}

// Blocks for `items` units of work (one unit per thread), at most one wave: every block then
// works to the end of the loop and none waits for a second wave.
template <auto Kernel>
unsigned grid_size(int64_t items, const Launch& L) {
  const int64_t cap = static_cast<int64_t>(L.sm_count) * resident_blocks_per_sm<Kernel>();
  int64_t b = (items + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

// ---- the element-wise kernel: f.run<W>(i) handles elements [i, i + W) ----
// With `vectorised` (every operand 16-byte aligned), packs of V elements first, then the tail of
// fewer than V elements one at a time; otherwise every element one at a time.  Each element is
// read and written once.

template <int V, class F>
__global__ void __launch_bounds__(kThreads) apply_kernel(int64_t n, bool vectorised, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  int64_t done = 0;
  if (vectorised) {
    const int64_t packs = n / V;
    for (int64_t p = tid; p < packs; p += stride) f.template run<V>(p * V);
    done = packs * V;
  }
  for (int64_t i = done + tid; i < n; i += stride) f.template run<1>(i);
}

template <int V, class F>
void launch_apply(const Launch& L, int64_t n, bool vectorised, const F& f, const char* op) {
  if (n <= 0) return;
  const int64_t items = vectorised ? n / V + n % V : n;
  apply_kernel<V, F><<<grid_size<apply_kernel<V, F>>(items, L), kThreads, 0, L.stream>>>(n, vectorised, f);
  check_launch(op);
}

// ---- small device helpers ----

__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }

template <class T>
__device__ __forceinline__ T positive_infinity();
template <>
__device__ __forceinline__ float positive_infinity<float>() {
  return __int_as_float(0x7f800000);
}
template <>
__device__ __forceinline__ double positive_infinity<double>() {
  return __longlong_as_double(0x7ff0000000000000LL);
}

}  // namespace plrt::cuda::dev
