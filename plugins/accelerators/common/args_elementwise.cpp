// The argument rules of fill, scale, axpy, cast and unscale_check (see kernel_args.hpp).
#include <cmath>
#include <limits>
#include <string>

#include "kernel_args.hpp"

namespace plrt::kernel_args {
namespace {

// A scalar for an integer tensor: a whole number, and (for arithmetic) within int64.
int64_t integral_scalar(double v, const char* op, const char* what, PL_DType dtype) {
  const std::string head = std::string(op) + ": " + what + " " + num(v) + " ";
  const std::string tail =
      std::string("; ") + pl_dtype_name(dtype) + " tensors take integral scalars only (whole numbers in [-2^63, 2^63))";
  if (!std::isfinite(v) || v != std::trunc(v)) fail(PL_ERR_INVALID_ARGUMENT, head + "is not a whole number" + tail);
  if (!(v >= -0x1p63 && v < 0x1p63)) fail(PL_ERR_INVALID_ARGUMENT, head + "is out of range" + tail);
  return static_cast<int64_t>(v);
}

// The value for fill: a whole number representable in `dtype`.
int64_t fill_value(double v, PL_DType dtype) {
  double lo = 0, hi = 0;
  const char* range = "";
  switch (dtype) {
    case PL_I32:
      lo = -2147483648.0;
      hi = 2147483647.0;
      range = "[-2147483648, 2147483647]";
      break;
    case PL_I64:
      lo = -0x1p63;
      hi = 0x1p63;
      range = "[-9223372036854775808, 9223372036854775807]";
      break;
    default:
      lo = 0;
      hi = 255;
      range = "[0, 255]";
      break;
  }
  const std::string valid = std::string("; valid for ") + pl_dtype_name(dtype) + ": whole numbers in " + range;
  if (!std::isfinite(v) || v != std::trunc(v))
    fail(PL_ERR_INVALID_ARGUMENT, "fill: value " + num(v) + " is not a whole number" + valid);
  const bool in_range = dtype == PL_I64 ? (v >= lo && v < hi) : (v >= lo && v <= hi);
  if (!in_range) fail(PL_ERR_INVALID_ARGUMENT, "fill: value " + num(v) + " is out of range" + valid);
  return static_cast<int64_t>(v);
}

}  // namespace

std::optional<int64_t> fill(Target target, const PL_Tensor* x, double value) {
  check_tensor_on(target, x, "fill", "x");
  if (is_int_dtype(x->dtype)) return fill_value(value, x->dtype);  // checked even when numel is 0
  return std::nullopt;
}

std::optional<int64_t> scale(Target target, const PL_Tensor* x, double alpha) {
  check_tensor_on(target, x, "scale", "x");
  if (is_int_dtype(x->dtype)) return integral_scalar(alpha, "scale", "alpha", x->dtype);
  return std::nullopt;
}

std::optional<int64_t> axpy(Target target, const PL_Tensor* y, double alpha, const PL_Tensor* x) {
  check_tensor_on(target, y, "axpy", "y");
  check_tensor_on(target, x, "axpy", "x");
  check_same_dtype(y, "y", x, "x", "axpy");
  check_same_numel(y, "y", x, "x", "axpy");
  check_same_device(target, y, "y", x, "x", "axpy");
  if (is_int_dtype(y->dtype)) return integral_scalar(alpha, "axpy", "alpha", y->dtype);
  return std::nullopt;
}

void cast(Target target, const PL_Tensor* dst, const PL_Tensor* src) {
  check_tensor_on(target, dst, "cast", "dst");
  check_tensor_on(target, src, "cast", "src");
  if (!is_float_dtype(dst->dtype) || !is_float_dtype(src->dtype))
    fail(PL_ERR_UNSUPPORTED, std::string("cast: ") + pl_dtype_name(src->dtype) + " -> " + pl_dtype_name(dst->dtype) +
                                 " is not supported; cast converts between float64, float32, float16 "
                                 "and bfloat16 only");
  check_same_numel(dst, "dst", src, "src", "cast");
  check_same_device(target, dst, "dst", src, "src", "cast");
}

void unscale_check(Target target, const PL_Tensor* x, double inv_scale, const PL_Tensor* found_inf) {
  const char* op = "unscale_check";
  check_tensor_on(target, x, op, "x");
  require_float_dtype(x, op, "x");
  check_tensor_on(target, found_inf, op, "found_inf");
  if (found_inf->dtype != PL_F32)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": found_inf is " + pl_dtype_name(found_inf->dtype) +
                                      "; it must be float32 with one element");
  if (found_inf->numel != 1)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": found_inf has " + std::to_string(found_inf->numel) +
                                      " elements; it must have exactly 1 (float32)");
  check_same_device(target, x, "x", found_inf, "found_inf", op);
  check_no_overlap(found_inf, "found_inf", x, "x", op, false);
  // Finite in the compute type too: 1e300 is a finite double but inf in float.
  const bool f64 = x->dtype == PL_F64;
  const double limit = f64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
  if (!(std::fabs(inv_scale) <= limit))
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": inv_scale " + num(inv_scale) + " is invalid; it must be finite" +
                                      (f64 ? ""
                                           : " in float32 (|inv_scale| <= " + num(std::numeric_limits<float>::max()) +
                                                 ") for a " + pl_dtype_name(x->dtype) + " tensor"));
}

}  // namespace plrt::kernel_args
