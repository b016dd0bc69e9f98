// cross_entropy and argmax_rows over the rows of [n, c] logits (f32/f64), one warp per row,
// grid-stride over the rows.
//
// cross_entropy runs two kernels: the first checks every label (a bad one: its row into the
// launch's check, whose verdict the second reads), the second computes nothing when any label was
// bad, so, as in the cpu reference, a bad label leaves loss and grad untouched.  The formulas are
// the cpu's; the sum of exponentials is added in a different order (lanes, then a butterfly), so
// results agree within float rounding rather than bit for bit.
#include <climits>

#include "check_epilogue.cuh"
#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

constexpr int kWarpsPerBlock = kThreads / 32;

struct LabelPayload {
  const int64_t* labels;
  __device__ void operator()(unsigned long long key, unsigned long long* p0, unsigned long long*) const {
    *p0 = static_cast<unsigned long long>(labels[key]);
  }
};

__global__ void __launch_bounds__(kThreads)
    label_check_kernel(const int64_t* labels, int64_t n, int64_t c, CheckSlot* slot, CheckRecord* record) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t label = labels[i];
    if (label < 0 || label >= c) report_error(slot, static_cast<unsigned long long>(i));  // the first bad row wins
  }
  finish_check(slot, record, LabelPayload{labels});
}

template <class T>
__global__ void __launch_bounds__(kThreads) cross_entropy_kernel(const T* x, const int64_t* labels, T* loss, T* grad,
                                                                 int64_t n, int64_t c, T scale, const CheckSlot* slot) {
  if (__ldcg(&slot->verdict) != kNoError) return;  // a bad label: nothing is written (the whole grid returns)
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  // Warp-uniform loop: every lane of a warp takes the same rows, so the shuffles see full warps.
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; row < n; row += warps) {
    const T* xr = x + row * c;
    T mx = -positive_infinity<T>();
    for (int64_t j = lane; j < c; j += 32) mx = xr[j] > mx ? xr[j] : mx;
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) {
      const T o = __shfl_xor_sync(kFullMask, mx, off);
      mx = o > mx ? o : mx;
    }
    T s = T(0);
    for (int64_t j = lane; j < c; j += 32) s += dexp(xr[j] - mx);
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) s += __shfl_xor_sync(kFullMask, s, off);  // every lane: the same sum
    const int64_t label = labels[row];
    const T xl = xr[label];
    // log(s) - (x[label] - mx) rather than mx + log(s) - x[label]: no cancellation of large logits.
    if (lane == 0) loss[row] = dlog(s) - (xl - mx);
    if (grad != nullptr) {
      __syncwarp();  // every lane has read x[label] before grad (which may be x) is written
      const T inv = T(1) / s;
      T* gr = grad + row * c;
      for (int64_t j = lane; j < c; j += 32) gr[j] = scale * (dexp(xr[j] - mx) * inv - (j == label ? T(1) : T(0)));
    }
  }
}

// (v, i) comes before (bv, bi) in argmax order: NaN first (as torch.argmax), then the larger
// value, then the smaller index.  A total order, so the reduction's order does not matter.
template <class T>
__device__ void take_better(T& bv, long long& bi, T v, long long i) {
  const bool vn = isnan(v), bn = isnan(bv);
  bool take;
  if (vn != bn)
    take = vn;
  else if (!vn && v != bv)
    take = v > bv;
  else
    take = i < bi;
  if (take) {
    bv = v;
    bi = i;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(const T* x, int64_t rows, int64_t cols, int64_t* out) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const T* xr = x + row * cols;
    T bv = -positive_infinity<T>();
    long long bi = LLONG_MAX;  // loses every tie with a real column
    for (int64_t j = lane; j < cols; j += 32) take_better(bv, bi, xr[j], static_cast<long long>(j));
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) {
      const T ov = __shfl_xor_sync(kFullMask, bv, off);
      const long long oi = __shfl_xor_sync(kFullMask, bi, off);
      take_better(bv, bi, ov, oi);
    }
    if (lane == 0) out[row] = bi;
  }
}

template <class F>
void dispatch_f32_f64(PL_DType dtype, F&& f) {
  kernel_args::dispatch<Case<PL_F32, float>, Case<PL_F64, double>>(dtype, "cuda dispatch_f32_f64", f);
}

}  // namespace

void launch_cross_entropy(const Launch& L, const PL_Tensor& logits, const PL_Tensor& labels, const PL_Tensor& loss,
                          const PL_Tensor* grad, double grad_scale, const CheckRef& check) {
  const int64_t n = logits.shape[0], c = logits.shape[1];
  if (n == 0) return;
  const auto* lab = static_cast<const int64_t*>(labels.data);
  label_check_kernel<<<grid_size<label_check_kernel>(n, L), kThreads, 0, L.stream>>>(lab, n, c, check.slot,
                                                                                     check.record);
  check_launch("cross_entropy");
  dispatch_f32_f64(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    const unsigned grid = grid_size<cross_entropy_kernel<T>>(n * 32, L);
    cross_entropy_kernel<T><<<grid, kThreads, 0, L.stream>>>(
        static_cast<const T*>(logits.data), lab, static_cast<T*>(loss.data),
        grad != nullptr ? static_cast<T*>(grad->data) : nullptr, n, c, static_cast<T>(grad_scale), check.slot);
    check_launch("cross_entropy");
  });
}

void launch_argmax_rows(const Launch& L, const PL_Tensor& x, const PL_Tensor& out) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return;
  dispatch_f32_f64(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const unsigned grid = grid_size<argmax_rows_kernel<T>>(rows * 32, L);
    argmax_rows_kernel<T>
        <<<grid, kThreads, 0, L.stream>>>(static_cast<const T*>(x.data), rows, cols, static_cast<int64_t*>(out.data));
    check_launch("argmax_rows");
  });
}

}  // namespace plrt::cuda
