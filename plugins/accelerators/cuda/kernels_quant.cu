// quantize_u8 / dequantize_u8: ByteGrad's per-chunk min-max uint8 format (pl_accelerator.h),
// with the cpu reference's float arithmetic (plugins/accelerators/cpu/kernels_quant.cpp).
//
// Layout: a group of G threads per chunk (G a power of two, about 16 elements per thread, at most
// a block), 256 / G chunks per block, grid-stride over the chunks.  quantize keeps a thread's
// first 16 elements in registers between the min/max reduction and the quantisation, so a chunk
// of up to 16 * G = 4096 elements is read from memory once; a longer chunk's remainder is read
// twice (the second time mostly from L2).  With chunk_size % 4 == 0 and aligned buffers, elements
// move four at a time (16-byte f32 loads, 4-byte uint8 stores).
//
// Errors found in the data are reported through the launch's check (kernel_checks.hpp) with keys
// that order them as the cpu loop meets them: element i is 2 * i (src[i] not finite), chunk c's
// range is 2 * (its last element) + 1 (quantize); chunk c is c (dequantize: min/max invalid).
#include <climits>
#include <type_traits>

#include "check_epilogue.cuh"
#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

constexpr int kPerThread = 16;  // elements a quantize thread keeps in registers

template <class S>
struct QuantArgs {
  const S* src;
  uint8_t* q;
  float* minmax;
  int64_t n, cs, chunks;
  CheckSlot* slot;
  CheckRecord* record;
};

template <class S>
struct DequantArgs {
  const uint8_t* q;
  const float* minmax;
  S* dst;
  int64_t n, cs, chunks;
  CheckSlot* slot;
  CheckRecord* record;
};

// min of lo, max of hi and min of bad over each group of G threads; every thread gets its
// group's result.  Every thread of the block must call it (shuffles over full warps, barriers).
template <int G>
__device__ void group_minmax(float& lo, float& hi, long long& bad, float* s_lo, float* s_hi, long long* s_bad) {
  constexpr int kWidth = G < 32 ? G : 32;
#pragma unroll
  for (int off = kWidth / 2; off >= 1; off /= 2) {  // xor within aligned groups of kWidth lanes
    const float olo = __shfl_xor_sync(kFullMask, lo, off);
    const float ohi = __shfl_xor_sync(kFullMask, hi, off);
    const long long obad = __shfl_xor_sync(kFullMask, bad, off);
    lo = olo < lo ? olo : lo;
    hi = ohi > hi ? ohi : hi;
    bad = obad < bad ? obad : bad;
  }
  if constexpr (G > 32) {
    constexpr int kWarps = G / 32;  // warps per group
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
      s_lo[warp] = lo;
      s_hi[warp] = hi;
      s_bad[warp] = bad;
    }
    __syncthreads();
    const int first = warp / kWarps * kWarps;
    lo = s_lo[first];
    hi = s_hi[first];
    bad = s_bad[first];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      lo = s_lo[first + w] < lo ? s_lo[first + w] : lo;
      hi = s_hi[first + w] > hi ? s_hi[first + w] : hi;
      bad = s_bad[first + w] < bad ? s_bad[first + w] : bad;
    }
    __syncthreads();  // every read done before the next chunk's writes
  }
}

// The message's values for a quantize key: the bad element (widened), or the chunk's min and max.
template <class Tr>
struct QuantPayload {
  const typename Tr::S* src;
  const float* minmax;
  int64_t cs;
  __device__ void operator()(unsigned long long key, unsigned long long* p0, unsigned long long* p1) const {
    const int64_t index = static_cast<int64_t>(key / 2);
    if (key % 2 == 0) {
      *p0 = __float_as_uint(Tr::load(src[index]));
    } else {
      const int64_t c = index / cs;
      *p0 = __float_as_uint(__ldcg(minmax + 2 * c));  // written by another block of this kernel
      *p1 = __float_as_uint(__ldcg(minmax + 2 * c + 1));
    }
  }
};

struct DequantPayload {
  const float* minmax;
  __device__ void operator()(unsigned long long key, unsigned long long* p0, unsigned long long* p1) const {
    const int64_t c = static_cast<int64_t>(key);
    *p0 = __float_as_uint(minmax[2 * c]);
    *p1 = __float_as_uint(minmax[2 * c + 1]);
  }
};

template <class Tr, int G, int P>
__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantArgs<typename Tr::S> a) {
  using S = typename Tr::S;
  constexpr int K = kPerThread / P;  // units of P elements kept in registers
  constexpr int kGroups = kThreads / G;
  constexpr long long kNone = LLONG_MAX;
  __shared__ float s_lo[kThreads / 32];
  __shared__ float s_hi[kThreads / 32];
  __shared__ long long s_bad[kThreads / 32];
  const int group = threadIdx.x / G;
  const int lane = threadIdx.x % G;
  // The trip count depends on blockIdx only: the barriers in group_minmax stay uniform.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kGroups; first < a.chunks;
       first += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t c = first + group;
    const bool active = c < a.chunks;
    const int64_t begin = active ? c * a.cs : 0;
    const int64_t len = active ? (a.n - begin < a.cs ? a.n - begin : a.cs) : 0;
    const int64_t units = len / P;  // whole units; elements [units * P, len) are the tail
    const S* x = a.src + begin;
    float v[K][P];
    float lo = positive_infinity<float>();
    float hi = -positive_infinity<float>();
    long long bad = kNone;  // the first non-finite element's index within the chunk
    auto note = [&](float val, int64_t idx) {
      if (!isfinite(val)) bad = idx < bad ? idx : bad;
      lo = val < lo ? val : lo;
      hi = val > hi ? val : hi;
    };
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t u = lane + static_cast<int64_t>(k) * G;
      if (u < units) {
        const Pack<S, P> pk = load_pack<P>(x + u * P);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          v[k][e] = Tr::load(pk.v[e]);
          note(v[k][e], u * P + e);
        }
      }
    }
    for (int64_t u = lane + static_cast<int64_t>(K) * G; u < units; u += G) {
      const Pack<S, P> pk = load_pack<P>(x + u * P);
#pragma unroll
      for (int e = 0; e < P; ++e) note(Tr::load(pk.v[e]), u * P + e);
    }
    for (int64_t t = units * P + lane; t < len; t += G) note(Tr::load(x[t]), t);

    group_minmax<G>(lo, hi, bad, s_lo, s_hi, s_bad);
    const float scale = (hi - lo) / 255.0f;
    if (active && lane == 0) {
      a.minmax[2 * c] = lo;
      a.minmax[2 * c + 1] = hi;
      if (bad != kNone)
        report_error(a.slot, 2ull * static_cast<unsigned long long>(begin + bad));
      else if (!isfinite(scale))
        report_error(a.slot, 2ull * static_cast<unsigned long long>(begin + len - 1) + 1ull);
    }

    const bool zero = scale == 0.0f;  // hi == lo, or a range so tiny that scale underflows
    auto quant = [&](float val) -> uint8_t {
      if (zero) return 0;
      float t = (val - lo) / scale;
      t = t < 0.0f ? 0.0f : t;
      t = t > 255.0f ? 255.0f : t;
      return static_cast<uint8_t>(__float2uint_rn(t));  // round half to even, as the cpu
    };
    uint8_t* out = a.q + begin;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t u = lane + static_cast<int64_t>(k) * G;
      if (u < units) {
        Pack<uint8_t, P> o;
#pragma unroll
        for (int e = 0; e < P; ++e) o.v[e] = quant(v[k][e]);
        store_pack<P>(out + u * P, o);
      }
    }
    for (int64_t u = lane + static_cast<int64_t>(K) * G; u < units; u += G) {
      const Pack<S, P> pk = load_pack<P>(x + u * P);
      Pack<uint8_t, P> o;
#pragma unroll
      for (int e = 0; e < P; ++e) o.v[e] = quant(Tr::load(pk.v[e]));
      store_pack<P>(out + u * P, o);
    }
    for (int64_t t = units * P + lane; t < len; t += G) out[t] = quant(Tr::load(x[t]));
  }
  finish_check(a.slot, a.record, QuantPayload<Tr>{a.src, a.minmax, a.cs});
}

template <class Tr, int G, int P>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(DequantArgs<typename Tr::S> a) {
  using S = typename Tr::S;
  constexpr int kGroups = kThreads / G;
  const int group = threadIdx.x / G;
  const int lane = threadIdx.x % G;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kGroups; first < a.chunks;
       first += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t c = first + group;
    if (c >= a.chunks) continue;
    const int64_t begin = c * a.cs;
    const int64_t len = a.n - begin < a.cs ? a.n - begin : a.cs;
    const int64_t units = len / P;
    const float lo = a.minmax[2 * c];
    const float hi = a.minmax[2 * c + 1];
    const float scale = (hi - lo) / 255.0f;
    if (!(isfinite(lo) && isfinite(hi) && lo <= hi && isfinite(scale))) {
      if (lane == 0) report_error(a.slot, static_cast<unsigned long long>(c));
      continue;  // the chunk is left unwritten
    }
    const uint8_t* in = a.q + begin;
    S* out = a.dst + begin;
    for (int64_t u = lane; u < units; u += G) {
      const Pack<uint8_t, P> qp = load_pack<P>(in + u * P);
      Pack<S, P> o;
#pragma unroll
      for (int e = 0; e < P; ++e) o.v[e] = Tr::store(lo + static_cast<float>(qp.v[e]) * scale);
      store_pack<P>(out + u * P, o);
    }
    for (int64_t t = units * P + lane; t < len; t += G) out[t] = Tr::store(lo + static_cast<float>(in[t]) * scale);
  }
  finish_check(a.slot, a.record, DequantPayload{a.minmax});
}

// Threads per chunk: about kPerThread elements each, at most a block.
int group_size(int64_t chunk_size) {
  const int64_t want = (chunk_size + kPerThread - 1) / kPerThread;
  for (int g : {1, 4, 16, 32, 64, 128})
    if (want <= g) return g;
  return kThreads;
}

using kernel_args::chunk_count;

// Calls f(std::integral_constant<int, G>{}) for the group size of `chunk_size`.
template <class F>
void dispatch_group(int64_t chunk_size, F&& f) {
  switch (group_size(chunk_size)) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return;
    case 4:
      f(std::integral_constant<int, 4>{});
      return;
    case 16:
      f(std::integral_constant<int, 16>{});
      return;
    case 32:
      f(std::integral_constant<int, 32>{});
      return;
    case 64:
      f(std::integral_constant<int, 64>{});
      return;
    case 128:
      f(std::integral_constant<int, 128>{});
      return;
    default:
      f(std::integral_constant<int, kThreads>{});
      return;
  }
}

// Calls f(Traits{}) for float32/float16/bfloat16 (the quantisable dtypes).
template <class F>
void dispatch_quant(PL_DType dtype, F&& f) {
  kernel_args::dispatch<Case<PL_F32, F32>, Case<PL_F16, F16>, Case<PL_BF16, BF16>>(dtype, "cuda dispatch_quant", f);
}

template <class Tr, int G, int P>
void quantize_with(const Launch& L, const QuantArgs<typename Tr::S>& a) {
  const unsigned grid = grid_size<quantize_kernel<Tr, G, P>>(a.chunks * G, L);
  quantize_kernel<Tr, G, P><<<grid, kThreads, 0, L.stream>>>(a);
  check_launch("quantize_u8");
}

template <class Tr, int G, int P>
void dequantize_with(const Launch& L, const DequantArgs<typename Tr::S>& a) {
  const unsigned grid = grid_size<dequantize_kernel<Tr, G, P>>(a.chunks * G, L);
  dequantize_kernel<Tr, G, P><<<grid, kThreads, 0, L.stream>>>(a);
  check_launch("dequantize_u8");
}

}  // namespace

void launch_quantize(const Launch& L, const PL_Tensor& src, uint8_t* q, float* minmax, int64_t chunk_size,
                     const CheckRef& check) {
  if (src.numel == 0) return;
  dispatch_quant(src.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const QuantArgs<S> a{static_cast<const S*>(src.data),    q,          minmax,      src.numel, chunk_size,
                         chunk_count(src.numel, chunk_size), check.slot, check.record};
    const bool by4 = chunk_size % 4 == 0 && aligned(src.data, 4 * sizeof(S)) && aligned(q, 4);
    dispatch_group(chunk_size, [&](auto g) {
      if (by4)
        quantize_with<Tr, decltype(g)::value, 4>(L, a);
      else
        quantize_with<Tr, decltype(g)::value, 1>(L, a);
    });
  });
}

void launch_dequantize(const Launch& L, const uint8_t* q, const float* minmax, const PL_Tensor& dst, int64_t chunk_size,
                       const CheckRef& check) {
  if (dst.numel == 0) return;
  dispatch_quant(dst.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const DequantArgs<S> a{q,          minmax,      static_cast<S*>(dst.data),
                           dst.numel,  chunk_size,  chunk_count(dst.numel, chunk_size),
                           check.slot, check.record};
    const bool by4 = chunk_size % 4 == 0 && aligned(dst.data, 4 * sizeof(S)) && aligned(q, 4);
    dispatch_group(chunk_size, [&](auto g) {
      if (by4)
        dequantize_with<Tr, decltype(g)::value, 4>(L, a);
      else
        dequantize_with<Tr, decltype(g)::value, 1>(L, a);
    });
  });
}

}  // namespace plrt::cuda
