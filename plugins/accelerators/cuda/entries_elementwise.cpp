// fill, scale, axpy, cast, unscale_check: the shared argument rules (kernel_args.hpp), then one
// asynchronous launch on the caller's stream.
#include <cstdint>
#include <optional>

#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

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
    const std::optional<int64_t> v = kernel_args::fill(kTarget, x, value);
    DeviceScope scope("fill", *x, "x", stream);
    if (v)
      launch_fill_int(scope.launch(), *x, *v);
    else
      launch_fill_float(scope.launch(), *x, value);
  });
}

PL_Error* cuda_scale(PL_Accelerator* acc, PL_Tensor* x, double alpha, PL_Stream* stream) {
  return run(acc, [&] {
    const std::optional<int64_t> a = kernel_args::scale(kTarget, x, alpha);
    DeviceScope scope("scale", *x, "x", stream);
    if (a)
      launch_scale_int(scope.launch(), *x, *a);
    else
      launch_scale_float(scope.launch(), *x, alpha);
  });
}

PL_Error* cuda_axpy(PL_Accelerator* acc, PL_Tensor* y, double alpha, const PL_Tensor* x, PL_Stream* stream) {
  return run(acc, [&] {
    const std::optional<int64_t> a = kernel_args::axpy(kTarget, y, alpha, x);
    DeviceScope scope("axpy", *y, "y", stream);
    if (a)
      launch_axpy_int(scope.launch(), *y, *a, *x);
    else
      launch_axpy_float(scope.launch(), *y, alpha, *x);
  });
}

PL_Error* cuda_cast(PL_Accelerator* acc, PL_Tensor* dst, const PL_Tensor* src, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::cast(kTarget, dst, src);
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
    kernel_args::unscale_check(kTarget, x, inv_scale, found_inf);
    DeviceScope scope("unscale_check", *x, "x", stream);
    launch_unscale_check(scope.launch(), *x, inv_scale, static_cast<float*>(found_inf->data));
  });
}

}  // namespace plrt::cuda
