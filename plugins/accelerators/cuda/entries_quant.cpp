// quantize_u8 / dequantize_u8: the cpu reference's checks, then one launch (kernels_quant.cu)
// whose data errors (a non-finite value, a chunk's range, an invalid min/max) are deferred: the
// launch stays asynchronous and the error is reported by the next synchronisation through this
// instance, with the cpu reference's message (kernel_checks.hpp).
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "tensor_checks.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace plrt::cuda {
namespace {

// ceil(n / chunk_size) without overflow; chunk_size >= 1 checked by the caller.
int64_t chunk_count(int64_t n, int64_t chunk_size) { return n / chunk_size + (n % chunk_size != 0 ? 1 : 0); }

void check_chunk_size(int64_t chunk_size, const char* op) {
  if (chunk_size < 1)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": chunk_size " + std::to_string(chunk_size) +
                                      " is invalid; valid: chunk_size >= 1");
}

void check_minmax(const PL_Tensor* minmax, int64_t n, int64_t chunk_size, const char* op) {
  if (minmax->dtype != PL_F32)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": minmax is " + pl_dtype_name(minmax->dtype) +
                                      "; it must be float32");
  const int64_t chunks = chunk_count(n, chunk_size);
  if (minmax->numel != 2 * chunks)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": minmax has " + std::to_string(minmax->numel) +
                                      " elements but " + std::to_string(n) + " elements in chunks of " +
                                      std::to_string(chunk_size) + " make " + std::to_string(chunks) +
                                      " chunks, which need " + std::to_string(2 * chunks) + " (min, max per chunk)");
}

void require_quant_dtype(const PL_Tensor* t, const char* what, const char* op) {
  if (t->dtype != PL_F32 && t->dtype != PL_F16 && t->dtype != PL_BF16)
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: float32, float16, bfloat16");
}

float float_bits(unsigned long long bits) {
  const auto u = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string range_message(int64_t chunk, float lo, float hi) {
  return "chunk " + std::to_string(chunk) + " has min " + num(lo) + " and max " + num(hi) +
         ", a range beyond float32; valid: max - min <= " + num(std::numeric_limits<float>::max());
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
    check_cuda_tensor(src, op, "src");
    check_cuda_tensor(q, op, "q");
    check_cuda_tensor(minmax, op, "minmax");
    require_quant_dtype(src, "src", op);
    if (q->dtype != PL_U8)
      fail(PL_ERR_INVALID_ARGUMENT, std::string("quantize_u8: q is ") + pl_dtype_name(q->dtype) + "; it must be uint8");
    check_same_numel(src, "src", q, "q", op);
    check_chunk_size(chunk_size, op);
    check_minmax(minmax, src->numel, chunk_size, op);
    check_same_device(src, "src", q, "q", op);
    check_same_device(src, "src", minmax, "minmax", op);
    check_no_overlap(q, "q", src, "src", op, false);
    check_no_overlap(minmax, "minmax", src, "src", op, false);
    check_no_overlap(minmax, "minmax", q, "q", op, false);
    DeviceScope scope(op, *src, "src", stream);
    if (src->numel == 0) return;
    auto describe = [cs = chunk_size](const CheckRecord& r) -> std::string {
      const int64_t index = static_cast<int64_t>(r.key / 2);
      if (r.key % 2 == 0)
        return "src[" + std::to_string(index) + "] is " + num(float_bits(r.p0)) + "; quantisation needs finite values";
      return range_message(index / cs, float_bits(r.p0), float_bits(r.p1));
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
    check_cuda_tensor(q, op, "q");
    check_cuda_tensor(minmax, op, "minmax");
    check_cuda_tensor(dst, op, "dst");
    if (q->dtype != PL_U8)
      fail(PL_ERR_INVALID_ARGUMENT, std::string("dequantize_u8: q is ") + pl_dtype_name(q->dtype) +
                                        "; it must be uint8");
    require_quant_dtype(dst, "dst", op);
    check_same_numel(dst, "dst", q, "q", op);
    check_chunk_size(chunk_size, op);
    check_minmax(minmax, q->numel, chunk_size, op);
    check_same_device(dst, "dst", q, "q", op);
    check_same_device(dst, "dst", minmax, "minmax", op);
    check_no_overlap(dst, "dst", q, "q", op, false);
    check_no_overlap(dst, "dst", minmax, "minmax", op, false);
    DeviceScope scope(op, *dst, "dst", stream);
    if (q->numel == 0) return;
    auto describe = [](const CheckRecord& r) -> std::string {
      const auto chunk = static_cast<int64_t>(r.key);
      const float lo = float_bits(r.p0), hi = float_bits(r.p1);
      if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi))
        return "chunk " + std::to_string(chunk) + " has min " + num(lo) + " and max " + num(hi) +
               "; valid: finite with min <= max";
      return range_message(chunk, lo, hi);
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
