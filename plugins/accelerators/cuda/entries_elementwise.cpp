// fill, scale, axpy, cast, unscale_check: argument checks (as the cpu reference, see
// tensor_checks.hpp), then one asynchronous launch on the caller's stream.
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "tensor_checks.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace plrt::cuda {
namespace {

// A scalar for an integer tensor: a whole number, and (for arithmetic) within int64.
int64_t integral_scalar(double v, const char* op, const char* what, PL_DType dtype) {
  const std::string head = std::string(op) + ": " + what + " " + num(v) + " ";
  const std::string tail = std::string("; ") + pl_dtype_name(dtype) +
                           " tensors take integral scalars only (whole numbers in [-2^63, 2^63))";
  if (!std::isfinite(v) || v != std::trunc(v)) fail(PL_ERR_INVALID_ARGUMENT, head + "is not a whole number" + tail);
  if (!(v >= -0x1p63 && v < 0x1p63)) fail(PL_ERR_INVALID_ARGUMENT, head + "is out of range" + tail);
  return static_cast<int64_t>(v);
}

// The value for fill: a whole number representable in `dtype`.
int64_t fill_value(double v, PL_DType dtype) {
  double lo = 0, hi = 0;
  const char* range = "";
  switch (dtype) {
    case PL_I32: lo = -2147483648.0; hi = 2147483647.0; range = "[-2147483648, 2147483647]"; break;
    case PL_I64: lo = -0x1p63; hi = 0x1p63; range = "[-9223372036854775808, 9223372036854775807]"; break;
    default: lo = 0; hi = 255; range = "[0, 255]"; break;
  }
  const std::string valid = std::string("; valid for ") + pl_dtype_name(dtype) + ": whole numbers in " + range;
  if (!std::isfinite(v) || v != std::trunc(v))
    fail(PL_ERR_INVALID_ARGUMENT, "fill: value " + num(v) + " is not a whole number" + valid);
  const bool in_range = dtype == PL_I64 ? (v >= lo && v < hi) : (v >= lo && v <= hi);
  if (!in_range) fail(PL_ERR_INVALID_ARGUMENT, "fill: value " + num(v) + " is out of range" + valid);
  return static_cast<int64_t>(v);
}

// dst = src for a same-dtype cast: a stream-ordered copy; partly overlapping buffers (the cpu
// reference's memmove allows them) go through a temporary, since cudaMemcpy's may not overlap.
void copy_same_dtype(const DeviceScope& scope, const PL_Tensor& dst, const PL_Tensor& src) {
  if (dst.data == src.data) return;
  const size_t bytes = static_cast<size_t>(dst.numel) * pl_dtype_size(dst.dtype);
  const auto d = reinterpret_cast<uintptr_t>(dst.data), s = reinterpret_cast<uintptr_t>(src.data);
  const bool overlap = d < s + bytes && s < d + bytes;
  if (!overlap) {
    check_cuda(cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, scope.stream()),
               "cast: cudaMemcpyAsync");
    return;
  }
  void* tmp = nullptr;
  check_cuda(cudaMallocAsync(&tmp, bytes, scope.stream()), "cast: cudaMallocAsync");
  cudaError_t rc = cudaMemcpyAsync(tmp, src.data, bytes, cudaMemcpyDeviceToDevice, scope.stream());
  if (rc == cudaSuccess) rc = cudaMemcpyAsync(dst.data, tmp, bytes, cudaMemcpyDeviceToDevice, scope.stream());
  cudaFreeAsync(tmp, scope.stream());
  check_cuda(rc, "cast: cudaMemcpyAsync (overlapping buffers)");
}

}  // namespace

PL_Error* cuda_fill(PL_Accelerator* acc, PL_Tensor* x, double value, PL_Stream* stream) {
  return run(acc, [&] {
    check_cuda_tensor(x, "fill", "x");
    if (is_int_dtype(x->dtype)) {
      const int64_t v = fill_value(value, x->dtype);  // checked even when numel is 0
      DeviceScope scope("fill", *x, "x", stream);
      launch_fill_int(scope.launch(), *x, v);
      return;
    }
    DeviceScope scope("fill", *x, "x", stream);
    launch_fill_float(scope.launch(), *x, value);
  });
}

PL_Error* cuda_scale(PL_Accelerator* acc, PL_Tensor* x, double alpha, PL_Stream* stream) {
  return run(acc, [&] {
    check_cuda_tensor(x, "scale", "x");
    if (is_int_dtype(x->dtype)) {
      const int64_t a = integral_scalar(alpha, "scale", "alpha", x->dtype);
      DeviceScope scope("scale", *x, "x", stream);
      launch_scale_int(scope.launch(), *x, a);
      return;
    }
    DeviceScope scope("scale", *x, "x", stream);
    launch_scale_float(scope.launch(), *x, alpha);
  });
}

PL_Error* cuda_axpy(PL_Accelerator* acc, PL_Tensor* y, double alpha, const PL_Tensor* x, PL_Stream* stream) {
  return run(acc, [&] {
    check_cuda_tensor(y, "axpy", "y");
    check_cuda_tensor(x, "axpy", "x");
    check_same_dtype(y, "y", x, "x", "axpy");
    check_same_numel(y, "y", x, "x", "axpy");
    check_same_device(y, "y", x, "x", "axpy");
    if (is_int_dtype(y->dtype)) {
      const int64_t a = integral_scalar(alpha, "axpy", "alpha", y->dtype);
      DeviceScope scope("axpy", *y, "y", stream);
      launch_axpy_int(scope.launch(), *y, a, *x);
      return;
    }
    DeviceScope scope("axpy", *y, "y", stream);
    launch_axpy_float(scope.launch(), *y, alpha, *x);
  });
}

PL_Error* cuda_cast(PL_Accelerator* acc, PL_Tensor* dst, const PL_Tensor* src, PL_Stream* stream) {
  return run(acc, [&] {
    check_cuda_tensor(dst, "cast", "dst");
    check_cuda_tensor(src, "cast", "src");
    if (!is_float_dtype(dst->dtype) || !is_float_dtype(src->dtype))
      fail(PL_ERR_UNSUPPORTED, std::string("cast: ") + pl_dtype_name(src->dtype) + " -> " +
                                   pl_dtype_name(dst->dtype) +
                                   " is not supported; cast converts between float64, float32, float16 "
                                   "and bfloat16 only");
    check_same_numel(dst, "dst", src, "src", "cast");
    check_same_device(dst, "dst", src, "src", "cast");
    DeviceScope scope("cast", *dst, "dst", stream);
    if (dst->numel == 0) return;
    if (dst->dtype == src->dtype)
      copy_same_dtype(scope, *dst, *src);
    else
      launch_cast(scope.launch(), *dst, *src);
  });
}

PL_Error* cuda_unscale_check(PL_Accelerator* acc, PL_Tensor* x, double inv_scale, PL_Tensor* found_inf,
                             PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "unscale_check";
    check_cuda_tensor(x, op, "x");
    require_float_dtype(x, "x", op);
    check_cuda_tensor(found_inf, op, "found_inf");
    if (found_inf->dtype != PL_F32)
      fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": found_inf is " + pl_dtype_name(found_inf->dtype) +
                                        "; it must be float32 with one element");
    if (found_inf->numel != 1)
      fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": found_inf has " + std::to_string(found_inf->numel) +
                                        " elements; it must have exactly 1 (float32)");
    check_same_device(x, "x", found_inf, "found_inf", op);
    check_no_overlap(found_inf, "found_inf", x, "x", op, false);
    // Finite in the compute type too: 1e300 is a finite double but inf in float.
    const bool f64 = x->dtype == PL_F64;
    const double limit = f64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
    if (!(std::fabs(inv_scale) <= limit))
      fail(PL_ERR_INVALID_ARGUMENT,
           std::string(op) + ": inv_scale " + num(inv_scale) + " is invalid; it must be finite" +
               (f64 ? "" : " in float32 (|inv_scale| <= " + num(std::numeric_limits<float>::max()) + ") for a " +
                               pl_dtype_name(x->dtype) + " tensor"));
    DeviceScope scope(op, *x, "x", stream);
    launch_unscale_check(scope.launch(), *x, inv_scale, static_cast<float*>(found_inf->data));
  });
}

}  // namespace plrt::cuda
