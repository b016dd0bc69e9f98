// add_bias, sum_rows, relu, relu_backward, and gemm's k == 0 case: the dense layers' math besides
// the matrix product (gemm_cublas.cpp).  f32, f64, f16, bf16; half types compute in f32 and round
// each result once (ABI 1.3).  relu and relu_backward select an operand or zero without arithmetic,
// so they pass values through bit for bit.
#include <algorithm>

#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

constexpr int kTileCols = 32;  // 2-D kernels: blocks of 32 columns x 8 rows
constexpr int kTileRows = kThreads / kTileCols;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class Tr>
struct ReluOp {
  using S = typename Tr::S;
  const S* x;
  S* y;  // may be x
  template <int W>
  __device__ void run(int64_t i) const {
    const S zero = Tr::store(typename Tr::C(0));
    const Pack<S, W> in = load_pack<W>(x + i);
    Pack<S, W> out;
#pragma unroll
    for (int k = 0; k < W; ++k) out.v[k] = Tr::load(in.v[k]) < typename Tr::C(0) ? zero : in.v[k];  // NaN stays
    store_pack<W>(y + i, out);
  }
};

template <class Tr>
struct ReluBackwardOp {
  using S = typename Tr::S;
  const S* y;
  const S* dy;
  S* dx;  // may be dy
  template <int W>
  __device__ void run(int64_t i) const {
    const S zero = Tr::store(typename Tr::C(0));
    const Pack<S, W> py = load_pack<W>(y + i);
    const Pack<S, W> pdy = load_pack<W>(dy + i);
    Pack<S, W> out;
#pragma unroll
    for (int k = 0; k < W; ++k) out.v[k] = Tr::load(py.v[k]) > typename Tr::C(0) ? pdy.v[k] : zero;
    store_pack<W>(dx + i, out);
  }
};

template <class Tr>
struct ScaleOutputOp {  // c = beta == 0 ? 0 : beta * c (beta == 0 drops NaNs in c)
  using S = typename Tr::S;
  S* c;
  typename Tr::C beta;
  bool beta_zero;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<S, W> p;
    if (beta_zero) {
      const S zero = Tr::store(typename Tr::C(0));
#pragma unroll
      for (int k = 0; k < W; ++k) p.v[k] = zero;
    } else {
      p = load_pack<W>(c + i);
#pragma unroll
      for (int k = 0; k < W; ++k) p.v[k] = Tr::store(beta * Tr::load(p.v[k]));
    }
    store_pack<W>(c + i, p);
  }
};

// y[r, j] += bias[j]: threadIdx.x walks columns (coalesced), threadIdx.y rows.
template <class Tr>
__global__ void __launch_bounds__(kThreads)
    add_bias_kernel(typename Tr::S* y, const typename Tr::S* bias, int64_t rows, int64_t cols) {
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * kTileRows + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * kTileRows) {
    typename Tr::S* row = y + r * cols;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * kTileCols)
      row[j] = Tr::store(Tr::load(row[j]) + Tr::load(bias[j]));
  }
}

template <class Tr>
__device__ typename Tr::S finish_sum(typename Tr::C total, const typename Tr::S* out, typename Tr::C alpha,
                                     typename Tr::C beta, bool beta_zero) {
  return beta_zero ? Tr::store(alpha * total) : Tr::store(alpha * total + beta * Tr::load(*out));
}

// Column sums of rows [seg * rows_per_seg, ...) of x, for blocks of 32 columns: eight row lanes
// each sum every eighth row, then lane sums add in a fixed order (deterministic).  One segment:
// the result goes straight to out; several: to partial[seg, col], added up by sum_rows_finish.
template <class Tr>
__global__ void __launch_bounds__(kThreads)
    sum_rows_kernel(const typename Tr::S* x, int64_t rows, int64_t cols, int64_t rows_per_seg, typename Tr::C* partial,
                    typename Tr::S* out, typename Tr::C alpha, typename Tr::C beta, bool beta_zero) {
  using C = typename Tr::C;
  __shared__ C acc[kTileRows][kTileCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t seg = blockIdx.y;
  const int64_t r0 = seg * rows_per_seg;
  const int64_t r1 = rows - r0 < rows_per_seg ? rows : r0 + rows_per_seg;
  // The trip count depends on blockIdx only: the barriers stay uniform.
  for (int64_t tile = blockIdx.x; tile * kTileCols < cols; tile += gridDim.x) {
    const int64_t j = tile * kTileCols + tx;
    C s = C(0);
    if (j < cols)
      for (int64_t r = r0 + ty; r < r1; r += kTileRows) s = s + Tr::load(x[r * cols + j]);
    acc[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < cols) {
      C t = acc[0][tx];
#pragma unroll
      for (int k = 1; k < kTileRows; ++k) t = t + acc[k][tx];
      if (partial != nullptr)
        partial[seg * cols + j] = t;
      else
        out[j] = finish_sum<Tr>(t, out + j, alpha, beta, beta_zero);
    }
    __syncthreads();
  }
}

template <class Tr>
__global__ void __launch_bounds__(kThreads)
    sum_rows_finish(const typename Tr::C* partial, int64_t segs, int64_t cols, typename Tr::S* out,
                    typename Tr::C alpha, typename Tr::C beta, bool beta_zero) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * kThreads) {
    typename Tr::C t = partial[j];
    for (int64_t s = 1; s < segs; ++s) t = t + partial[s * cols + j];
    out[j] = finish_sum<Tr>(t, out + j, alpha, beta, beta_zero);
  }
}

}  // namespace

void launch_relu(const Launch& L, const PL_Tensor& x, const PL_Tensor& y) {
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const ReluOp<Tr> op{static_cast<const S*>(x.data), static_cast<S*>(y.data)};
    launch_apply<pack_width(sizeof(S))>(L, x.numel, aligned(x.data, 16) && aligned(y.data, 16), op, "relu");
  });
}

void launch_relu_backward(const Launch& L, const PL_Tensor& y, const PL_Tensor& dy, const PL_Tensor& dx) {
  dispatch_float(y.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const ReluBackwardOp<Tr> op{static_cast<const S*>(y.data), static_cast<const S*>(dy.data),
                                static_cast<S*>(dx.data)};
    const bool vec = aligned(y.data, 16) && aligned(dy.data, 16) && aligned(dx.data, 16);
    launch_apply<pack_width(sizeof(S))>(L, y.numel, vec, op, "relu_backward");
  });
}

void launch_scale_output(const Launch& L, const PL_Tensor& c, double beta) {
  dispatch_float(c.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const ScaleOutputOp<Tr> op{static_cast<S*>(c.data), static_cast<typename Tr::C>(beta), beta == 0};
    launch_apply<pack_width(sizeof(S))>(L, c.numel, aligned(c.data, 16), op, "gemm");
  });
}

void launch_add_bias(const Launch& L, const PL_Tensor& y, const PL_Tensor& bias) {
  const int64_t rows = y.shape[0], cols = y.shape[1];
  if (rows == 0 || cols == 0) return;
  dispatch_float(y.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const int64_t target = static_cast<int64_t>(L.sm_count) * resident_blocks_per_sm<add_bias_kernel<Tr>>();
    const int64_t gx = std::min<int64_t>(ceil_div(cols, kTileCols), target);
    const int64_t gy = std::min<int64_t>({ceil_div(rows, kTileRows), std::max<int64_t>(1, target / gx), 65535});
    add_bias_kernel<Tr>
        <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(kTileCols, kTileRows), 0, L.stream>>>(
            static_cast<S*>(y.data), static_cast<const S*>(bias.data), rows, cols);
    check_launch("add_bias");
  });
}

void launch_sum_rows(const Launch& L, double alpha, const PL_Tensor& x, double beta, const PL_Tensor& out) {
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (cols == 0) return;
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    using C = typename Tr::C;
    const int64_t target = static_cast<int64_t>(L.sm_count) * resident_blocks_per_sm<sum_rows_kernel<Tr>>();
    const int64_t gx = std::min<int64_t>(ceil_div(cols, kTileCols), 0x7fffffff);
    // Few column tiles: split the rows into segments (at least 64 rows each) to fill the GPU.
    int64_t segs = 1;
    if (rows > 0 && gx < target)
      segs = std::max<int64_t>(1, std::min<int64_t>({ceil_div(target, gx), ceil_div(rows, 64), 65535}));
    const int64_t rows_per_seg = rows > 0 ? ceil_div(rows, segs) : 0;
    if (rows > 0) segs = ceil_div(rows, rows_per_seg);  // no empty segment
    const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
    const bool beta_zero = beta == 0;
    const S* xs = static_cast<const S*>(x.data);
    S* os = static_cast<S*>(out.data);
    const dim3 block(kTileCols, kTileRows);
    if (segs == 1) {
      sum_rows_kernel<Tr><<<dim3(static_cast<unsigned>(gx), 1), block, 0, L.stream>>>(xs, rows, cols, rows_per_seg,
                                                                                      nullptr, os, a, b, beta_zero);
      check_launch("sum_rows");
      return;
    }
    void* partial = nullptr;
    check_cuda(cudaMallocAsync(&partial, static_cast<size_t>(segs * cols) * sizeof(C), L.stream),
               "sum_rows: cudaMallocAsync of the partial sums");
    sum_rows_kernel<Tr><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(segs)), block, 0, L.stream>>>(
        xs, rows, cols, rows_per_seg, static_cast<C*>(partial), os, a, b, beta_zero);
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess) {
      const unsigned fx = grid_size<sum_rows_finish<Tr>>(cols, L);
      sum_rows_finish<Tr>
          <<<fx, kThreads, 0, L.stream>>>(static_cast<const C*>(partial), segs, cols, os, a, b, beta_zero);
      rc = cudaGetLastError();
    }
    cudaFreeAsync(partial, L.stream);  // stream-ordered: after the kernels that read it
    check_cuda(rc, "sum_rows kernel launch");
  });
}

}  // namespace plrt::cuda
