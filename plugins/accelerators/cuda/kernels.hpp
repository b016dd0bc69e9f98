// The launchers of the cuda kernels (kernels_*.cu), called by the entries (entries_*.cpp) after
// every argument check.  They dispatch on dtype, size the grid and launch asynchronously on the
// Launch's stream; a failed launch throws a Failure.  Arguments are trusted here: dtypes, counts,
// shapes and scalars have been checked, and the current device is the tensors' device.
//
// The arithmetic is the cpu reference's (plugins/accelerators/cpu/kernels.hpp), element for element.
#pragma once

#include <plrt/pl_accelerator.h>

#include <cstdint>

#include "cuda_common.hpp"
#include "kernel_args.hpp"

namespace plrt::cuda {

// ---- kernels_elementwise.cu ----
void launch_fill_float(const Launch& L, const PL_Tensor& x, double value);
void launch_fill_int(const Launch& L, const PL_Tensor& x, int64_t value);  // value fits the dtype
void launch_scale_float(const Launch& L, const PL_Tensor& x, double alpha);
void launch_scale_int(const Launch& L, const PL_Tensor& x, int64_t alpha);  // wraps modulo 2^bits
void launch_axpy_float(const Launch& L, const PL_Tensor& y, double alpha, const PL_Tensor& x);
void launch_axpy_int(const Launch& L, const PL_Tensor& y, int64_t alpha, const PL_Tensor& x);
// dst and src of different float dtypes (a same-dtype cast is a copy, done by the entry).
void launch_cast(const Launch& L, const PL_Tensor& dst, const PL_Tensor& src);
// x = x * inv_scale; *found_inf = 1.0f when an element was inf or NaN (kernels_amp.cu).
void launch_unscale_check(const Launch& L, const PL_Tensor& x, double inv_scale, float* found_inf);

// ---- kernels_clip.cu (ABI 1.5): x f32, f64, f16 or bf16 ----
// *out += sum of x[i]^2 in double (out: one double on the current device), in a fixed order.
void launch_sum_squares(const Launch& L, const PL_Tensor& x, double* out);
// x = min(max(x, lo), hi) with the bounds rounded to x's dtype; lo <= hi, neither NaN.
void launch_clamp(const Launch& L, const PL_Tensor& x, double lo, double hi);

// ---- kernels_optim.cu: the scalars the argument rules derived, in double (kernel_args.hpp) ----
using kernel_args::AdamScalars;
using kernel_args::SgdScalars;
void launch_sgd(const Launch& L, const PL_Tensor& param, const PL_Tensor& grad, const PL_Tensor* momentum_buf,
                const SgdScalars& s);

void launch_adam(const Launch& L, const PL_Tensor& param, const PL_Tensor& grad, const PL_Tensor& exp_avg,
                 const PL_Tensor& exp_avg_sq, const AdamScalars& s);

// ---- kernels_quant.cu: ByteGrad; errors go to `check` (keys in kernel_checks.hpp) ----
void launch_quantize(const Launch& L, const PL_Tensor& src, uint8_t* q, float* minmax, int64_t chunk_size,
                     const CheckRef& check);
void launch_dequantize(const Launch& L, const uint8_t* q, const float* minmax, const PL_Tensor& dst, int64_t chunk_size,
                       const CheckRef& check);

// ---- kernels_layers.cu: row-major matrices of f32, f64, f16 or bf16 ----
void launch_add_bias(const Launch& L, const PL_Tensor& y, const PL_Tensor& bias);
void launch_sum_rows(const Launch& L, double alpha, const PL_Tensor& x, double beta, const PL_Tensor& out);
void launch_relu(const Launch& L, const PL_Tensor& x, const PL_Tensor& y);
void launch_relu_backward(const Launch& L, const PL_Tensor& y, const PL_Tensor& dy, const PL_Tensor& dx);
// c = beta == 0 ? 0 : beta * c (gemm with k == 0: there is no product to add).
void launch_scale_output(const Launch& L, const PL_Tensor& c, double beta);

// ---- kernels_loss.cu: logits f32/f64 [n, c], labels i64 [n] ----
// Labels are checked first (a bad one: its row into `check`, and nothing is written).
void launch_cross_entropy(const Launch& L, const PL_Tensor& logits, const PL_Tensor& labels, const PL_Tensor& loss,
                          const PL_Tensor* grad, double grad_scale, const CheckRef& check);
void launch_argmax_rows(const Launch& L, const PL_Tensor& x, const PL_Tensor& out);

// ---- kernels_pack.cu (ABI 1.4) ----
// Parts per launch: the kernel takes their addresses as parameters (24 bytes a part, under CUDA
// 12.1's 32 KiB limit for kernel parameters).
constexpr size_t kPackBatch = 1024;
// pack: flat[offsets[i]...] = parts[i]; unpack (unpack == true): parts[i] = that slice.  The parts
// and flat are on the current device; the arrays are read before it returns.
void launch_pack(const Launch& L, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets,
                 const PL_Tensor& flat, bool unpack);

}  // namespace plrt::cuda
