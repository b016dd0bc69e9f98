// The argument rules of every accelerator kernel, in one place: what each kernel checks before it
// touches any data (descriptors, devices, dtypes, counts and shapes, scalar ranges, optimizer
// parameters, chunk counts, overlaps), in the order the errors are reported.  The cpu plugin (the
// reference) and the cuda plugin both call these, so they give the same codes and messages; only
// the device a tensor must be on differs (Target, arg_checks.hpp).  The semantics are documented
// in plugins/accelerators/cpu/kernels.hpp.
//
// Each function throws plrt::plugin::Failure for the first bad argument and returns what the
// checks already had to work out (an integral scalar, a product's sizes, an optimizer's scalars).
// Nothing here reads tensor data: errors that only the data shows (a label, a non-finite value)
// are each plugin's own, with the messages built by the *_message functions below.
#pragma once

#include <plrt/pl_accelerator.h>

#include <cstdint>
#include <optional>
#include <string>

#include "arg_checks.hpp"

namespace plrt::kernel_args {

// ---- element-wise (args_elementwise.cpp) ----

// For an integer x: the value as that integer (a whole number the dtype holds); nullopt for floats.
std::optional<int64_t> fill(Target target, const PL_Tensor* x, double value);
// For integer tensors: alpha as int64 (a whole number in [-2^63, 2^63)); nullopt for floats.
std::optional<int64_t> scale(Target target, const PL_Tensor* x, double alpha);
std::optional<int64_t> axpy(Target target, const PL_Tensor* y, double alpha, const PL_Tensor* x);
void cast(Target target, const PL_Tensor* dst, const PL_Tensor* src);
void unscale_check(Target target, const PL_Tensor* x, double inv_scale, const PL_Tensor* found_inf);

// ---- gradient clipping (ABI 1.5; args_clip.cpp) ----

// x float (PL_ERR_UNSUPPORTED otherwise); out float64 with numel 1 on x's device, not inside x.
void sum_squares(Target target, const PL_Tensor* x, const PL_Tensor* out);
// x float; lo and hi not NaN, lo <= hi (infinite bounds are fine).
void clamp(Target target, const PL_Tensor* x, double lo, double hi);

// ---- optimizers (args_optim.cpp): the checked parameters as the kernels use them ----

// In double, as given or derived from the parameters once per call (see kernels.hpp).
struct SgdScalars {
  double lr, momentum, one_minus_dampening, weight_decay;
  bool has_wd, has_momentum, nesterov, first_step;
};
// momentum_buf is checked (and must be non-NULL) only when momentum != 0.
SgdScalars sgd_step(Target target, const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* momentum_buf,
                    const PL_SgdParams* params);

struct AdamScalars {
  double beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
  double step_size, bc2_sqrt, decay;  // lr / (1 - beta1^step), sqrt(1 - beta2^step), 1 - lr * wd
  bool decoupled, has_wd;
  bool freeze_v, grad_is_m;  // ABI 1.6: QAdam's update (exp_avg_sq read only; grad is the new exp_avg)
};
AdamScalars adam_step(Target target, const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* exp_avg,
                      const PL_Tensor* exp_avg_sq, const PL_AdamParams* params);

// ---- bucket copies (args_pack.cpp): pack (unpack == false) and unpack, as pl_accelerator.h states
// them: parts on flat's device with flat's dtype, each slice inside flat, no part overlapping flat,
// and for unpack no two parts overlapping. ----
void pack(Target target, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets, const PL_Tensor* flat,
          bool unpack);

// ---- ByteGrad quantisation (args_quant.cpp) ----

// ceil(n / chunk_size) without overflow; chunk_size >= 1.
inline int64_t chunk_count(int64_t n, int64_t chunk_size) { return n / chunk_size + (n % chunk_size != 0 ? 1 : 0); }

void quantize_u8(Target target, const PL_Tensor* src, const PL_Tensor* q, const PL_Tensor* minmax, int64_t chunk_size);
void dequantize_u8(Target target, const PL_Tensor* q, const PL_Tensor* minmax, const PL_Tensor* dst,
                   int64_t chunk_size);

// The data errors' messages, after "<op>: ".
std::string nonfinite_src_message(int64_t index, float value);        // quantize: src[index] is inf/NaN
std::string chunk_range_message(int64_t chunk, float lo, float hi);   // (hi - lo) / 255 overflows float
std::string chunk_minmax_message(int64_t chunk, float lo, float hi);  // dequantize: not finite, or lo > hi

// ---- dense layers (args_layers.cpp) ----

struct GemmDims {
  int64_t m, n, k;  // op(a) [m, k], op(b) [k, n], c [m, n]
};
GemmDims gemm(Target target, int32_t trans_a, int32_t trans_b, const PL_Tensor* a, const PL_Tensor* b,
              const PL_Tensor* c);
// A size passed to a BLAS `library` whose index type holds at most `max` (a larger one would
// wrap); returns v.
int64_t blas_index(int64_t v, int64_t max, const char* op, const char* what, const char* library);

void add_bias(Target target, const PL_Tensor* y, const PL_Tensor* bias);
void sum_rows(Target target, const PL_Tensor* x, const PL_Tensor* out);
void relu(Target target, const PL_Tensor* x, const PL_Tensor* y);
void relu_backward(Target target, const PL_Tensor* y, const PL_Tensor* dy, const PL_Tensor* dx);
// grad may be NULL.  The labels' values are the plugin's to check (label_message).
void cross_entropy(Target target, const PL_Tensor* logits, const PL_Tensor* labels, const PL_Tensor* loss,
                   const PL_Tensor* grad);
std::string label_message(int64_t label, int64_t row, int64_t classes);
void argmax_rows(Target target, const PL_Tensor* x, const PL_Tensor* out);

}  // namespace plrt::kernel_args
