// Shared by the test_cuda_*.cpp suites: the cuda accelerator loaded through the SDK from this
// build's plugin folder, device buffers, host data of every dtype, and comparisons against the cpu
// reference kernels (plrt::cpu, linked directly).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/runtime.hpp>
#include <random>
#include <string>
#include <vector>

#include "half.hpp"
#include "kernels.hpp"
#include "plugin_support.hpp"

namespace cuda_test {

inline pl::Runtime& runtime() {
  static pl::Runtime rt([] {
    pl::RuntimeOptions o;
    o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
    o.use_env_dirs = false;
    o.use_default_dirs = false;
    o.log_level = "warn";
    return o;
  }());
  return rt;
}

inline pl::Accelerator& cuda() {
  static pl::Accelerator acc(runtime(), "cuda");
  return acc;
}

inline const PL_AcceleratorApi* api() { return cuda().api(); }

// Turns a PL_Error from the plugin into pl::Error.
inline void ok(PL_Error* e) { pl::check(cuda().host(), e); }

// The error a plugin call returns: code and message ("" and PL_ERR_OK when it succeeds).
struct Outcome {
  PL_ErrorCode code = PL_ERR_OK;
  std::string message;
};
inline Outcome outcome(PL_Error* e) {
  Outcome o;
  if (e == nullptr) return o;
  const PL_Host* h = cuda().host();
  o.code = h->error_code(e);
  o.message = h->error_message(e);
  h->error_destroy(e);
  return o;
}

inline bool gpu_available() { return cuda().device_count() > 0; }

#define REQUIRE_GPU()                                                                      \
  do {                                                                                     \
    if (!cuda_test::gpu_available())                                                       \
      GTEST_SKIP() << "no usable CUDA device: " << cuda_test::cuda().unavailable_reason(); \
  } while (0)

constexpr PL_Device kGpu{PL_DEVICE_CUDA, 0};
constexpr PL_Device kHost{PL_DEVICE_CPU, 0};

// A flat (ndim 1) or shaped descriptor over `data`.
inline PL_Tensor tensor(void* data, PL_DType dtype, PL_Device dev, std::vector<int64_t> shape) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device = dev;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    t.shape[d] = shape[d];
    n *= shape[d];
  }
  t.numel = n;
  return t;
}

// Host bytes of `n` elements of `dtype`, plus spare room so that offset views stay inside.
struct Host {
  PL_DType dtype = PL_F32;
  int64_t n = 0;
  std::vector<uint8_t> bytes;
  Host() = default;
  Host(PL_DType d, int64_t count) : dtype(d), n(count), bytes(static_cast<size_t>(count) * pl_dtype_size(d) + 64, 0) {}
  size_t size() const { return static_cast<size_t>(n) * pl_dtype_size(dtype); }
  void* data() { return bytes.data(); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(bytes.data());
  }
  PL_Tensor t(std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {n};
    return tensor(n > 0 ? data() : nullptr, dtype, kHost, shape);
  }
};

// Device memory holding a Host's elements at `offset_elems` elements past a 256-byte aligned
// allocation: offset 1 makes every pack access misaligned, which exercises the scalar path.
struct Dev {
  void* base = nullptr;
  PL_DType dtype = PL_F32;
  int64_t n = 0;
  int64_t offset = 0;
  Dev(PL_DType d, int64_t count, int64_t offset_elems = 0) : dtype(d), n(count), offset(offset_elems) {
    base = cuda().alloc(kGpu, static_cast<size_t>(count + offset_elems) * pl_dtype_size(d) + 16);
  }
  explicit Dev(const Host& h, int64_t offset_elems = 0) : Dev(h.dtype, h.n, offset_elems) { upload(h); }
  ~Dev() { cuda().free(kGpu, base); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void* data() const { return static_cast<uint8_t*>(base) + offset * static_cast<int64_t>(pl_dtype_size(dtype)); }
  size_t size() const { return static_cast<size_t>(n) * pl_dtype_size(dtype); }
  void upload(const Host& h) {
    if (h.size() > 0) cuda().copy(data(), kGpu, h.bytes.data(), kHost, h.size());
  }
  Host download() const {
    Host h(dtype, n);
    if (size() > 0) cuda().copy(h.data(), kHost, data(), kGpu, size());
    return h;
  }
  PL_Tensor t(std::vector<int64_t> shape = {}) const {
    if (shape.empty()) shape = {n};
    return tensor(n > 0 ? data() : nullptr, dtype, kGpu, shape);
  }
};

// ---- data ----

inline bool is_float(PL_DType d) { return d == PL_F32 || d == PL_F64 || d == PL_F16 || d == PL_BF16; }

// Element i as a double.
inline double value_at(const Host& h, int64_t i) {
  const uint8_t* p = h.bytes.data();
  switch (h.dtype) {
    case PL_F32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case PL_F64: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case PL_F16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return plrt::cpu::f16_to_f32(b);
    }
    case PL_BF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return plrt::cpu::bf16_to_f32(b);
    }
    case PL_I32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case PL_I64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<double>(v);
    }
    case PL_U8:
      return p[i];
    default:
      return 0;
  }
}

// Stores v rounded once (the cpu conversions) into element i.
inline void set_value(Host& h, int64_t i, double v) {
  uint8_t* p = h.bytes.data();
  switch (h.dtype) {
    case PL_F32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      break;
    }
    case PL_F64:
      std::memcpy(p + 8 * i, &v, 8);
      break;
    case PL_F16: {
      const uint16_t b = plrt::cpu::f64_to_f16(v);
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
    case PL_BF16: {
      const uint16_t b = plrt::cpu::f64_to_bf16(v);
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
    case PL_I32: {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(p + 4 * i, &x, 4);
      break;
    }
    case PL_I64: {
      const auto x = static_cast<int64_t>(v);
      std::memcpy(p + 8 * i, &x, 8);
      break;
    }
    case PL_U8:
      p[i] = static_cast<uint8_t>(v);
      break;
    default:
      break;
  }
}

// Uniform values in [lo, hi] (floats) or random bit patterns (integers: every value, so that
// products wrap).  Deterministic per seed.
inline Host random_host(PL_DType d, int64_t n, uint32_t seed, double lo = -4.0, double hi = 4.0) {
  Host h(d, n);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) {
    if (is_float(d)) {
      set_value(h, i, u(rng));
    } else {
      const uint64_t bits = rng();
      std::memcpy(h.bytes.data() + static_cast<size_t>(i) * pl_dtype_size(d), &bits, pl_dtype_size(d));
    }
  }
  return h;
}

// Plants special values (inf, -inf, NaN, -0, subnormals, huge) at a few spread-out positions.
inline void plant_specials(Host& h, bool with_non_finite) {
  if (h.n == 0 || !is_float(h.dtype)) return;
  std::vector<double> specials = {-0.0, 1e-40, -5e-8, 6.5e4, 70000.0, 3e38, -1e300, 1e-310};
  if (with_non_finite) {
    specials.push_back(INFINITY);
    specials.push_back(-INFINITY);
    specials.push_back(NAN);
  }
  for (size_t k = 0; k < specials.size(); ++k) {
    const auto i = static_cast<int64_t>((k * 7919) % h.n);
    set_value(h, i, specials[k]);
    if (!with_non_finite && !std::isfinite(value_at(h, i))) set_value(h, i, -1.5);  // overflowed the dtype
  }
}

inline uint64_t bits_at(const Host& h, int64_t i) {
  uint64_t b = 0;
  const size_t s = pl_dtype_size(h.dtype);
  std::memcpy(&b, h.bytes.data() + static_cast<size_t>(i) * s, s);
  return b;
}

// Every element equal bit for bit, except that any NaN equals any NaN (the GPU's f16/bf16
// conversions make the canonical NaN; the cpu's keep the payload).
inline ::testing::AssertionResult same_elements(const Host& got, const Host& want) {
  if (got.n != want.n || got.dtype != want.dtype) return ::testing::AssertionFailure() << "size or dtype differ";
  for (int64_t i = 0; i < got.n; ++i) {
    if (bits_at(got, i) == bits_at(want, i)) continue;
    if (is_float(got.dtype) && std::isnan(value_at(got, i)) && std::isnan(value_at(want, i))) continue;
    return ::testing::AssertionFailure() << pl_dtype_name(got.dtype) << " element " << i << " of " << got.n << ": got "
                                         << value_at(got, i) << " (bits 0x" << std::hex << bits_at(got, i) << "), want "
                                         << std::dec << value_at(want, i) << " (bits 0x" << std::hex << bits_at(want, i)
                                         << ")";
  }
  return ::testing::AssertionSuccess();
}

// The spacing of `dtype`'s values near |v| (an ulp), for tolerances.
inline double ulp_of(PL_DType dtype, double v) {
  const int mant = dtype == PL_F16 ? 10 : dtype == PL_BF16 ? 7 : dtype == PL_F32 ? 23 : 52;
  const int emin = dtype == PL_F16 ? -14 : dtype == PL_F64 ? -1022 : -126;
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

// |got - want| <= ulps * ulp(want) + abs_tol at every element; NaN matches NaN, inf matches inf.
inline ::testing::AssertionResult close_elements(const Host& got, const Host& want, double ulps, double abs_tol) {
  if (got.n != want.n) return ::testing::AssertionFailure() << "sizes differ";
  for (int64_t i = 0; i < got.n; ++i) {
    const double g = value_at(got, i), w = value_at(want, i);
    if (std::isnan(g) && std::isnan(w)) continue;
    if (g == w) continue;
    if (std::fabs(g - w) <= ulps * ulp_of(want.dtype, w) + abs_tol) continue;
    return ::testing::AssertionFailure() << pl_dtype_name(got.dtype) << " element " << i << " of " << got.n << ": got "
                                         << g << ", want " << w << " (tolerance " << ulps << " ulp + " << abs_tol
                                         << ")";
  }
  return ::testing::AssertionSuccess();
}

// Runs a cpu reference kernel that must throw; its Failure's code and message.
template <class F>
Outcome cpu_outcome(F&& f) {
  try {
    f();
  } catch (const plrt::plugin::Failure& e) {
    return {e.code, e.message};
  }
  return {};
}

inline const std::vector<int64_t>& sizes() {
  static const std::vector<int64_t> s = {0, 1, 7, 1000, (int64_t{1} << 20) + 3};
  return s;
}

}  // namespace cuda_test
