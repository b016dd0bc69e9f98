// quantize_u8 / dequantize_u8: the shared argument rules, then one launch (kernels_quant.cu)
// whose data errors (a non-finite value, a chunk's range, an invalid min/max) are deferred: the
// launch stays asynchronous and the error is reported by the next synchronisation through this
// instance, with the cpu reference's message (kernel_checks.hpp, kernel_args.hpp).
#include <cmath>
#include <cstring>
#include <string>

#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

float float_bits(unsigned long long bits) {
  const auto u = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Runs the launch with a check ticket, then defers the ticket (or gives it back if the launch failed).
template <class Launcher>
void launch_checked(PL_Accelerator* acc, const DeviceScope& scope, const char* op, Launcher&& launcher,
                    KernelChecks::Describe describe) {
  const KernelChecks::Ticket t = acc->checks.acquire(scope.device(), scope.stream());
  try {
    launcher(t.ref);
  } catch (...) {
    acc->checks.release(t);  // nothing was launched
    throw;
  }
  acc->checks.defer(t, scope.stream(), op, std::move(describe));
}

}  // namespace

PL_Error* cuda_quantize_u8(PL_Accelerator* acc, const PL_Tensor* src, PL_Tensor* q, PL_Tensor* minmax,
                           int64_t chunk_size, PL_Stream* stream) {
  return run(acc, [&] {
    constexpr const char* op = "quantize_u8";
    kernel_args::quantize_u8(kTarget, src, q, minmax, chunk_size);
    DeviceScope scope(op, *src, "src", stream);
    if (src->numel == 0) return;
    auto describe = [cs = chunk_size](const CheckRecord& r) -> std::string {
      const int64_t index = static_cast<int64_t>(r.key / 2);
      if (r.key % 2 == 0) return kernel_args::nonfinite_src_message(index, float_bits(r.p0));
      return kernel_args::chunk_range_message(index / cs, float_bits(r.p0), float_bits(r.p1));
    };
    launch_checked(
        acc, scope, op,
        [&](const CheckRef& ref) {
          launch_quantize(scope.launch(), *src, static_cast<uint8_t*>(q->data), static_cast<float*>(minmax->data),
                          chunk_size, ref);
        },
        describe);
  });
}

PL_Error* cuda_dequantize_u8(PL_Accelerator* acc, const PL_Tensor* q, const PL_Tensor* minmax, PL_Tensor* dst,
                             int64_t chunk_size, PL_Stream* stream) {
  return run(acc, [&] {
    constexpr const char* op = "dequantize_u8";
    kernel_args::dequantize_u8(kTarget, q, minmax, dst, chunk_size);
    DeviceScope scope(op, *dst, "dst", stream);
    if (q->numel == 0) return;
    auto describe = [](const CheckRecord& r) -> std::string {
      const auto chunk = static_cast<int64_t>(r.key);
      const float lo = float_bits(r.p0), hi = float_bits(r.p1);
      if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi))
        return kernel_args::chunk_minmax_message(chunk, lo, hi);
      return kernel_args::chunk_range_message(chunk, lo, hi);
    };
    launch_checked(
        acc, scope, op,
        [&](const CheckRef& ref) {
          launch_dequantize(scope.launch(), static_cast<const uint8_t*>(q->data),
                            static_cast<const float*>(minmax->data), *dst, chunk_size, ref);
        },
        describe);
  });
}

}  // namespace plrt::cuda
