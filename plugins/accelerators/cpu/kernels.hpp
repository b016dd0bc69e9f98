// The CPU reference kernels behind the cpu accelerator plugin (pl_accelerator.h).  Plain C++
// functions on PL_Tensor descriptors; every bad argument throws plrt::plugin::Failure (via fail())
// whose message names the argument, the bad value and what would be valid.  The plugin turns the
// Failure into a PL_Error at its boundary.  Other accelerators (CUDA) mirror these semantics; the
// exact arithmetic is spelled out below so that they can.
//
// Common rules (the argument checks live in ../common/kernel_args.hpp, shared with the cuda
// plugin, which applies them to CUDA tensors instead of host ones)
//  - Tensors are checked with plrt::plugin::check_tensor (NULL descriptor, struct_size, dtype,
//    negative numel, NULL data with numel > 0) and must have device.type == PL_DEVICE_CPU (the
//    index is not checked: all host memory is one device).  Tensors that take part in one call
//    must have the same numel (errors name both counts); numel 0 is a valid no-op.
//  - Parameter structs (PL_SgdParams, PL_AdamParams) must be non-NULL with a v1 struct_size.
//  - Tensors of one call must not overlap, except that an in-place operand is its own output.
//  - "Compute type" C: float for float32/float16/bfloat16, double for float64.  f16/bf16 values
//    are widened to float exactly, the formula runs in C with every operation rounded to C
//    (left to right, no fused multiply-add: the library builds with -ffp-contract=off), and the
//    result is rounded once on store (round to nearest, ties to even; see half.hpp).  Double
//    scalars (alpha, lr, ...) are converted to C once per call, after any scalar-only arithmetic
//    noted below has been done in double.
//  - Error codes: PL_ERR_UNSUPPORTED for a dtype the kernel does not implement,
//    PL_ERR_INVALID_ARGUMENT for everything else the caller got wrong (mismatched dtypes or counts,
//    out-of-range scalars, a tensor on another device, non-finite quantize input).
#pragma once

#include <plrt/pl_accelerator.h>

#include <cstdint>

namespace plrt::cpu {

// x[i] = value, for all 7 dtypes.
//  float dtypes: value rounded once to the dtype (float64 -> float16/bfloat16 rounds directly from
//    the double); non-finite values are allowed.
//  int32/int64/uint8: value must be a whole number representable in the dtype
//    (int32 [-2^31, 2^31-1], int64 [-2^63, 2^63-1], uint8 [0, 255]).
void fill(const PL_Tensor* x, double value);

// x[i] = x[i] * alpha, for all 7 dtypes.
//  float dtypes: C(x) * C(alpha).
//  integer dtypes: alpha must be a whole number in [-2^63, 2^63); the product is computed modulo
//    2^bits (in unsigned arithmetic), as PyTorch's integer tensors wrap.
void scale(const PL_Tensor* x, double alpha);

// y[i] = y[i] + alpha * x[i]; same dtype and numel; all 7 dtypes.
//  float dtypes: C(y) + C(alpha) * C(x).
//  integer dtypes: as scale, modulo 2^bits.
void axpy(const PL_Tensor* y, double alpha, const PL_Tensor* x);

// dst[i] = src[i] converted, for any pair of float64, float32, float16, bfloat16 (same dtype =
// a copy).  Every conversion rounds once (f64 -> f16/bf16 directly, f16 <-> bf16 through the exact
// f32 value).  Other dtypes: PL_ERR_UNSUPPORTED.
void cast(const PL_Tensor* dst, const PL_Tensor* src);

// One torch.optim.SGD step (single-tensor path) on float32/float64/float16/bfloat16; param, grad
// and momentum_buf of one dtype and numel.  In C, with lr, momentum, wd and (1 - dampening) (the
// subtraction done in double) converted to C:
//    d = g;  if (weight_decay != 0) d = d + wd * p
//    if (momentum != 0) {
//      b = first_step ? d : momentum * buf + (1-dampening) * d;   buf = b (rounded on store)
//      d = nesterov ? d + momentum * b : b                        (b: the unrounded C value)
//    }
//    p = p - lr * d
// Checks (as PyTorch's constructor, plus finiteness): lr, momentum, weight_decay finite and >= 0;
// dampening finite; nesterov needs momentum > 0 and dampening == 0.  momentum_buf may be NULL only
// when momentum == 0 (it is then ignored).
void sgd_step(const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* momentum_buf, const PL_SgdParams* params);

// One torch.optim.Adam / AdamW step (single-tensor path, no amsgrad) on float32/float64/float16/
// bfloat16; param, grad, exp_avg, exp_avg_sq of one dtype and numel.  Scalars in double:
//    bc1 = 1 - beta1^step;  bc2 = 1 - beta2^step  (std::pow);  step_size = lr / bc1;
//    bc2_sqrt = sqrt(bc2);  decay = 1 - lr * weight_decay
// then converted to C, with beta1, beta2, (1 - beta1), (1 - beta2), eps, weight_decay.  In C:
//    if (decoupled) { if (weight_decay != 0) p = p * decay }        (AdamW)
//    else if (weight_decay != 0) g = g + weight_decay * p            (Adam)
//    m = beta1 * m + (1 - beta1) * g
//    v = beta2 * v + ((1 - beta2) * g) * g
//    denom = sqrt(v) / bc2_sqrt + eps
//    p = p - step_size * (m / denom)
// m, v and p are rounded once on store.  (PyTorch computes m with lerp_, m + (1-beta1)*(g - m):
// the same value up to rounding.)  Checks: step >= 1; beta1, beta2 in [0, 1); lr, eps,
// weight_decay finite and >= 0.
void adam_step(const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* exp_avg, const PL_Tensor* exp_avg_sq,
               const PL_AdamParams* params);

// ByteGrad min-max quantisation.  src: float32/float16/bfloat16 with n elements, in chunks of
// chunk_size (>= 1) elements, the last possibly shorter; nchunks = ceil(n / chunk_size).
// minmax: float32 with exactly 2 * nchunks elements, written {min, max} per chunk.  q: uint8 with n
// elements.  q and minmax must not overlap src or each other.  Per chunk, in float:
//    lo = min(x), hi = max(x)   (x widened exactly to float)
//    scale = (hi - lo) / 255.0f
//    q = 0                                      when scale == 0 (hi == lo, or a range so tiny
//                                               that scale underflows)
//    q = rne(clamp((x - lo) / scale, 0, 255))   otherwise; rne = round half to even
// A non-finite src element is PL_ERR_INVALID_ARGUMENT naming its index; a chunk whose scale is not
// finite (hi - lo beyond the float range) is PL_ERR_INVALID_ARGUMENT naming the chunk.  After an
// error the contents of q and minmax are unspecified (chunks before the bad one are written).
void quantize_u8(const PL_Tensor* src, const PL_Tensor* q, const PL_Tensor* minmax, int64_t chunk_size);

// The inverse: q uint8 (n), minmax float32 (2 * nchunks), dst float32/float16/bfloat16 (n), dst
// overlapping neither:
//    scale = (hi - lo) / 255.0f;   x = lo + (float)q * scale   (in float, rounded once to dst)
// minmax values must be finite with lo <= hi, and scale finite (else PL_ERR_INVALID_ARGUMENT
// naming the chunk).  The round trip error is at most scale / 2 plus float rounding.
void dequantize_u8(const PL_Tensor* q, const PL_Tensor* minmax, const PL_Tensor* dst, int64_t chunk_size);

// ---- ABI 1.2/1.3: the math of dense layers (kernels_gemm.cpp, kernels_layers.cpp) ----
// Matrices are row-major tensors with ndim == 2 and numel == shape[0] * shape[1]; vectors have
// ndim == 1.  gemm, add_bias, sum_rows, relu and relu_backward take float32, float64 and (ABI 1.3)
// float16 and bfloat16; cross_entropy and argmax_rows take float32 and float64 only.  Other dtypes
// are PL_ERR_UNSUPPORTED, and all float operands of one call share the dtype.  A shape mismatch is
// PL_ERR_INVALID_ARGUMENT naming both shapes.  Outputs must not overlap inputs, except where an
// entry allows an exact alias (the same data pointer); a partial overlap is PL_ERR_INVALID_ARGUMENT.
// Sums run in the compute type C (float for float32/float16/bfloat16, double for float64), with
// alpha and beta converted to C; float16/bfloat16 operands are widened exactly and each result is
// rounded once on store (half.hpp).  Results are within float rounding of the exact math, as other
// accelerators give (their summation order differs).

// c = alpha * op(a) @ op(b) + beta * c through OpenBLAS (cblas_sgemm / cblas_dgemm).  trans_a and
// trans_b are 0 (op(x) = x) or 1 (op(x) = x^T); op(a) [m, k], op(b) [k, n], c [m, n].  beta == 0:
// c is only written (NaNs in it do not propagate); k == 0: c = beta * c.  Each size must fit
// OpenBLAS's index type (int).
// float16/bfloat16 are emulated: what tensor cores compute.  a and b (and c when beta != 0) are
// widened exactly to float scratch, cblas_sgemm runs on it with (float)alpha and (float)beta, and
// each element of the float result is rounded once into c.  k == 0: c = (float)beta * c, rounded.
void gemm(int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a, const PL_Tensor* b, double beta,
          const PL_Tensor* c);

// OpenBLAS's thread pool size for gemm.  Process-wide (OpenBLAS keeps one pool): the last
// accelerator instance that sets it wins.  n >= 1 (else PL_ERR_INVALID_ARGUMENT).
void set_blas_threads(int n);
int blas_threads();

// y[i, j] = y[i, j] + bias[j] in C, rounded once; y [rows, cols], bias [cols].
void add_bias(const PL_Tensor* y, const PL_Tensor* bias);

// out[j] = alpha * (sum_i x[i, j]) + beta * out[j]; x [rows, cols], out [cols].  The column sums
// run over i in order, in C, from 0; the whole right side is computed in C and rounded once.
// beta == 0: out[j] = alpha * sum, and out is only written.
void sum_rows(double alpha, const PL_Tensor* x, double beta, const PL_Tensor* out);

// y = x < 0 ? +0 : x (NaN stays NaN, as torch.relu; values are copied as stored, so float16/
// bfloat16 involve no rounding); x, y of one shape; y may be x.
void relu(const PL_Tensor* x, const PL_Tensor* y);

// dx = y > 0 ? dy : +0 (y is relu's output; dy copied as stored); y, dy, dx of one shape; dx may
// be dy.
void relu_backward(const PL_Tensor* y, const PL_Tensor* dy, const PL_Tensor* dx);

// Softmax cross-entropy over the rows of logits [n, c] with labels (int64 [n]), in C:
//    mx = max_j x[i, j];  s = sum_j exp(x[i, j] - mx)
//    loss[i] = log(s) - (x[i, label] - mx)                     (loss [n], the logits' dtype)
//    grad[i, j] = grad_scale * (exp(x[i, j] - mx) / s - (j == label))   (grad [n, c]; optional)
// grad may be NULL, or logits itself (each element is read before it is overwritten).  Every label
// is checked before anything is written: one outside [0, c) is PL_ERR_INVALID_ARGUMENT naming its
// row, its value and c (so c == 0 with n > 0 is an error: no label can be valid).
void cross_entropy(const PL_Tensor* logits, const PL_Tensor* labels, const PL_Tensor* loss, const PL_Tensor* grad,
                   double grad_scale);

// out[i] = the first j where x[i, j] is maximal (a NaN counts as the maximum, as torch.argmax);
// x [rows, cols] float32/float64, out int64 [rows].  cols == 0 with rows > 0 is
// PL_ERR_INVALID_ARGUMENT (an empty row has no argmax).
void argmax_rows(const PL_Tensor* x, const PL_Tensor* out);

// ---- ABI 1.3: mixed precision (kernels_amp.cpp) ----

// The gradient scaler's unscale (torch._amp_foreach_non_finite_check_and_unscale_):
//    x[i] = C(x[i]) * C(inv_scale), rounded once on store          (x: float32/float64/float16/bfloat16)
//    found_inf[0] = 1.0f when any x[i] was +-inf or NaN before scaling; otherwise left as it was
// found_inf is float32 with numel 1 and never cleared, so one flag collects many tensors.  Every
// element is scaled even when one is not finite (as PyTorch does; the step is skipped anyway).
// inv_scale must be finite in C (|inv_scale| <= FLT_MAX unless x is float64).  Errors:
// PL_ERR_UNSUPPORTED for a non-float x; PL_ERR_INVALID_ARGUMENT for a found_inf that is not float32,
// has numel != 1, or overlaps x, and for a non-finite inv_scale.  numel 0 is a no-op.
void unscale_check(const PL_Tensor* x, double inv_scale, const PL_Tensor* found_inf);

// ---- gradient clipping (ABI 1.5; kernels_clip.cpp) ----

// out[0] = out[0] + sum_i x[i]^2, with every element widened exactly to double and every product
// and sum in double (x: float32/float64/float16/bfloat16; out: float64 with numel 1, not inside x).
// The cpu adds in 8 interleaved partial sums (element i in sum i % 8), then pairwise; other
// accelerators add in their own fixed order, so results agree within double rounding.  out is only
// added to, so one out collects many tensors (a norm's square).  inf/NaN elements make the sum
// inf/NaN.  Errors: PL_ERR_UNSUPPORTED for a non-float x; PL_ERR_INVALID_ARGUMENT for an out that is
// not float64, has numel != 1 or overlaps x.  numel 0 adds nothing.
void sum_squares(const PL_Tensor* x, const PL_Tensor* out);

// x[i] = min(max(x[i], lo), hi) (torch.clamp_): lo and hi are rounded once to x's dtype (float64:
// exact); an element below the rounded lo becomes it, one above the rounded hi becomes it, every
// other element keeps its bits (NaN stays NaN, -0 stays -0).  x float32/float64/float16/bfloat16.
// lo and hi must not be NaN and lo <= hi (PL_ERR_INVALID_ARGUMENT naming them); infinite bounds are
// fine.
void clamp(const PL_Tensor* x, double lo, double hi);

// ---- bucket copies (ABI 1.4; kernels_pack.cpp) ----
// pack:   flat[offsets[i] .. offsets[i] + parts[i].numel) = parts[i]   for every i
// unpack: parts[i] = flat[offsets[i] .. offsets[i] + parts[i].numel)   for every i
// Offsets count elements; any dtype, every part flat's; errors (PL_ERR_INVALID_ARGUMENT) for a NULL
// array, a part of another dtype, a slice past flat's end, a part overlapping flat, and (unpack)
// two parts sharing memory.  num_parts 0 is a no-op.
void pack(const PL_Tensor* parts, size_t num_parts, const int64_t* offsets, const PL_Tensor* flat);
void unpack(const PL_Tensor* flat, const int64_t* offsets, const PL_Tensor* parts, size_t num_parts);

}  // namespace plrt::cpu
