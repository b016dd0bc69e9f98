// Host fallbacks of the ABI 1.5 accelerator entries (see host_kernels.hpp).
#include "host_kernels.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "half.hpp"
#include "sdk_internal.hpp"

namespace plrt::sdk {
namespace {

std::string where(PL_Device d) {
  const char* t = d.type == PL_DEVICE_CPU ? "cpu" : d.type == PL_DEVICE_CUDA ? "cuda" : nullptr;
  return (t ? std::string(t) : "device type " + std::to_string(d.type)) + ":" + std::to_string(d.index);
}

[[noreturn]] void fail(const Accelerator& acc, PL_ErrorCode code, const std::string& msg) {
  throw Error(code, "accelerator '" + acc.name() + "': " + msg);
}

bool is_float(PL_DType d) { return d == PL_F32 || d == PL_F64 || d == PL_F16 || d == PL_BF16; }

void check_descriptor(const Accelerator& acc, const PL_Tensor& t, const std::string& what) {
  if (t.struct_size < PL_STRUCT_SIZE(PL_Tensor, shape))
    fail(acc, PL_ERR_VERSION,
         what + ": PL_Tensor.struct_size " + std::to_string(t.struct_size) + " is smaller than the v1 size " +
             std::to_string(PL_STRUCT_SIZE(PL_Tensor, shape)));
  if (pl_dtype_size(t.dtype) == 0)
    fail(acc, PL_ERR_INVALID_ARGUMENT,
         what + ": unknown dtype " + std::to_string(t.dtype) +
             " (valid: float32, float64, float16, bfloat16, int32, int64, uint8)");
  if (t.numel < 0) fail(acc, PL_ERR_INVALID_ARGUMENT, what + ": negative element count " + std::to_string(t.numel));
  if (t.numel > 0 && t.data == nullptr)
    fail(acc, PL_ERR_INVALID_ARGUMENT, what + ": data is NULL for " + std::to_string(t.numel) + " elements");
}

void check_float_x(const Accelerator& acc, const PL_Tensor& x, const char* op) {
  check_descriptor(acc, x, std::string(op) + ": x");
  if (!is_float(x.dtype))
    fail(acc, PL_ERR_UNSUPPORTED,
         std::string(op) + ": x has dtype " + pl_dtype_name(x.dtype) +
             "; supported: float32, float64, float16, bfloat16");
}

// The bytes of a tensor in host memory: the tensor's own when it lives there, else a copy made
// through the accelerator (and written back by write_back()).
class HostBytes {
 public:
  HostBytes(const Accelerator& acc, const PL_Tensor& t)
      : acc_(acc), t_(t), bytes_(static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype)) {
    if (bytes_ == 0 || t.device.type == PL_DEVICE_CPU) return;
    copy_.resize(bytes_);
    acc_.copy(copy_.data(), PL_Device{PL_DEVICE_CPU, 0}, t.data, t.device, bytes_);
  }
  void* data() { return copy_.empty() ? t_.data : copy_.data(); }
  void write_back() {
    if (!copy_.empty()) acc_.copy(t_.data, t_.device, copy_.data(), PL_Device{PL_DEVICE_CPU, 0}, bytes_);
  }

 private:
  const Accelerator& acc_;
  const PL_Tensor& t_;
  size_t bytes_;
  std::vector<unsigned char> copy_;
};

// Element i widened exactly to double.
double load(const void* p, PL_DType d, int64_t i) {
  switch (d) {
    case PL_F32:
      return static_cast<const float*>(p)[i];
    case PL_F64:
      return static_cast<const double*>(p)[i];
    case PL_F16:
      return plrt::cpu::f16_to_f64(static_cast<const uint16_t*>(p)[i]);
    default:  // PL_BF16 (checked)
      return plrt::cpu::bf16_to_f64(static_cast<const uint16_t*>(p)[i]);
  }
}

// `v` rounded once to the dtype, as raw bits in the low pl_dtype_size(d) bytes.
uint64_t rounded_bits(double v, PL_DType d) {
  uint64_t out = 0;
  switch (d) {
    case PL_F32: {
      const float f = static_cast<float>(v);
      std::memcpy(&out, &f, sizeof f);
      break;
    }
    case PL_F64:
      std::memcpy(&out, &v, sizeof v);
      break;
    case PL_F16:
      out = plrt::cpu::f64_to_f16(v);
      break;
    default:
      out = plrt::cpu::f64_to_bf16(v);
      break;
  }
  return out;
}

}  // namespace

void host_sum_squares(const Accelerator& acc, const PL_Tensor& x, PL_Tensor& out) {
  const char* op = "sum_squares";
  check_float_x(acc, x, op);
  check_descriptor(acc, out, "sum_squares: out");
  if (out.dtype != PL_F64)
    fail(acc, PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": out is " + pl_dtype_name(out.dtype) +
             "; it must be float64 with one element (the sum is kept in double)");
  if (out.numel != 1)
    fail(acc, PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": out has " + std::to_string(out.numel) + " elements; it must have exactly 1 (float64)");
  if (out.device.type != x.device.type || out.device.index != x.device.index)
    fail(acc, PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": x is on " + where(x.device) + " but out is on " + where(out.device) +
             "; the tensors of one call must be on the same device");
  const auto xb = reinterpret_cast<uintptr_t>(x.data), ob = reinterpret_cast<uintptr_t>(out.data);
  if (x.numel > 0 && ob < xb + static_cast<uintptr_t>(x.numel) * pl_dtype_size(x.dtype) && xb < ob + sizeof(double))
    fail(acc, PL_ERR_INVALID_ARGUMENT, std::string(op) + ": out overlaps x; the output must be a separate buffer");
  HostBytes xs(acc, x);
  double total = 0;
  for (int64_t i = 0; i < x.numel; ++i) {
    const double v = load(xs.data(), x.dtype, i);
    total = total + v * v;
  }
  HostBytes os(acc, out);
  double* sum = static_cast<double*>(os.data());
  *sum = *sum + total;
  os.write_back();
}

void host_clamp(const Accelerator& acc, PL_Tensor& x, double lo, double hi) {
  const char* op = "clamp";
  check_float_x(acc, x, op);
  if (std::isnan(lo) || std::isnan(hi))
    fail(acc, PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": bounds lo " + shortest(lo) + " and hi " + shortest(hi) +
             " must not be NaN (valid: lo <= hi, infinities allowed)");
  if (lo > hi)
    fail(acc, PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": lo " + shortest(lo) + " is greater than hi " + shortest(hi) +
             "; the bounds must satisfy lo <= hi");
  if (x.numel == 0) return;
  HostBytes xs(acc, x);
  const size_t size = pl_dtype_size(x.dtype);
  const uint64_t lo_bits = rounded_bits(lo, x.dtype), hi_bits = rounded_bits(hi, x.dtype);
  // The bounds as the dtype holds them, widened exactly (the comparisons are then exact).
  const double r_lo = load(&lo_bits, x.dtype, 0), r_hi = load(&hi_bits, x.dtype, 0);
  auto* p = static_cast<unsigned char*>(xs.data());
  for (int64_t i = 0; i < x.numel; ++i) {
    const double v = load(p, x.dtype, i);
    if (v < r_lo) std::memcpy(p + static_cast<size_t>(i) * size, &lo_bits, size);
    if (v > r_hi) std::memcpy(p + static_cast<size_t>(i) * size, &hi_bits, size);
  }
  xs.write_back();
}

}  // namespace plrt::sdk
