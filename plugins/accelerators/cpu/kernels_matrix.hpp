// Internal helpers of the layer kernels (kernels_gemm.cpp, kernels_layers.cpp, kernels_amp.cpp):
// shape checks for matrices and vectors, the dtype checks and dispatch, and the overlap check.
// The layer entries name shapes in their errors, which the element-wise kernels (counts only)
// never needed.
#pragma once

#include "kernels_detail.hpp"

#include <cstdint>
#include <string>

namespace plrt::cpu::detail {

// "[3, 4]"
inline std::string shape_str(const PL_Tensor* t) {
  std::string s = "[";
  for (int32_t d = 0; d < t->ndim && d < PL_MAX_DIMS; ++d) s += (d ? ", " : "") + std::to_string(t->shape[d]);
  return s + "]";
}

// check_cpu_tensor, then ndim == `ndim` with a shape that agrees with numel: a descriptor whose
// shape and count disagree would make the loops read past the buffer.
inline void check_shaped(const PL_Tensor* t, int32_t ndim, const char* op, const char* what) {
  check_cpu_tensor(t, op, what);
  const char* kind = ndim == 1 ? "a vector (ndim 1)" : "a matrix (ndim 2)";
  if (t->ndim != ndim)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " must be " + kind + " but has ndim " +
                                      std::to_string(t->ndim) +
                                      (t->ndim >= 0 && t->ndim <= PL_MAX_DIMS ? ", shape " + shape_str(t) : ""));
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t->shape[d] < 0)
      fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has a negative size in shape " + shape_str(t));
    n *= t->shape[d];
  }
  if (n != t->numel)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has shape " + shape_str(t) + " (" +
                                      std::to_string(n) + " elements) but numel " + std::to_string(t->numel));
}

// The loss and argmax kernels implement float32 and float64 only (autocast runs them in f32).
inline void require_f32_f64(const PL_Tensor* t, const char* op, const char* what) {
  if (t->dtype != PL_F32 && t->dtype != PL_F64)
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: float32, float64");
}

// gemm, add_bias, sum_rows, relu, relu_backward: every float dtype (ABI 1.3 adds f16/bf16).
inline void require_layer_float(const PL_Tensor* t, const char* op, const char* what) {
  if (!is_float_dtype(t->dtype))
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: float32, float64, float16, bfloat16");
}

inline void require_i64(const PL_Tensor* t, const char* op, const char* what) {
  if (t->dtype != PL_I64)
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: int64");
}

// "a [3, 4] and b [4]": both shapes, for mismatch messages.
inline std::string both_shapes(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name) {
  return std::string(a_name) + " has shape " + shape_str(a) + " but " + b_name + " has shape " + shape_str(b);
}

// `out` must not share memory with `in`; with exact_alias_ok, the very same buffer (an in-place
// call the entry allows) is fine.
inline void check_no_overlap(const PL_Tensor* out, const char* out_name, const PL_Tensor* in, const char* in_name,
                             const char* op, bool exact_alias_ok) {
  if (out->numel == 0 || in->numel == 0) return;
  const auto o = reinterpret_cast<uintptr_t>(out->data), i = reinterpret_cast<uintptr_t>(in->data);
  const uintptr_t o_end = o + static_cast<uintptr_t>(out->numel) * pl_dtype_size(out->dtype);
  const uintptr_t i_end = i + static_cast<uintptr_t>(in->numel) * pl_dtype_size(in->dtype);
  if (o >= i_end || i >= o_end) return;
  if (exact_alias_ok && o == i && o_end == i_end) return;
  fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + out_name + " overlaps " + in_name +
                                    (exact_alias_ok ? "; it must be the same buffer or a separate one"
                                                    : "; the output must be a separate buffer"));
}

// Calls f(float{}) or f(double{}); the caller has checked the dtype.
template <class F>
void dispatch_f32_f64(PL_DType dtype, F&& f) {
  if (dtype == PL_F32)
    f(float{});
  else if (dtype == PL_F64)
    f(double{});
  else
    fail(PL_ERR_INTERNAL, std::string("dispatch_f32_f64: ") + pl_dtype_name(dtype));
}

}  // namespace plrt::cpu::detail
