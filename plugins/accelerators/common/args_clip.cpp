// The argument rules of sum_squares and clamp (ABI 1.5, gradient clipping; see kernel_args.hpp and
// pl_accelerator.h).  Descriptors, device, dtypes and counts, then the bounds; nothing is read.
#include <cmath>
#include <string>

#include "kernel_args.hpp"

namespace plrt::kernel_args {

void sum_squares(Target target, const PL_Tensor* x, const PL_Tensor* out) {
  const char* op = "sum_squares";
  check_tensor_on(target, x, op, "x");
  require_float_dtype(x, op, "x");
  check_tensor_on(target, out, op, "out");
  if (out->dtype != PL_F64)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": out is " + pl_dtype_name(out->dtype) +
                                      "; it must be float64 with one element (the sum is kept in double)");
  if (out->numel != 1)
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": out has " + std::to_string(out->numel) + " elements; it must have exactly 1 (float64)");
  check_same_device(target, x, "x", out, "out", op);
  check_no_overlap(out, "out", x, "x", op, false);
}

void clamp(Target target, const PL_Tensor* x, double lo, double hi) {
  const char* op = "clamp";
  check_tensor_on(target, x, op, "x");
  require_float_dtype(x, op, "x");
  if (std::isnan(lo) || std::isnan(hi))
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": bounds lo " + num(lo) + " and hi " + num(hi) +
                                      " must not be NaN (valid: lo <= hi, infinities allowed)");
  if (lo > hi)
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": lo " + num(lo) + " is greater than hi " + num(hi) + "; the bounds must satisfy lo <= hi");
}

}  // namespace plrt::kernel_args
