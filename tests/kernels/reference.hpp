// Test-side references for the CPU kernel tests, written independently of the kernels (they do not
// include half.hpp): f16/bf16 decoding with ldexp, rounding by searching the sorted table of a
// format's values, a tensor buffer, and a helper that checks a thrown Failure.
#pragma once

#include <gtest/gtest.h>
#include <plrt/pl_tensor.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "plugin_support.hpp"

namespace ref {

// A binary format with E exponent bits and M stored significand bits (f16: 5/10, bf16: 8/7).
struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint16_t inf_bits() const { return static_cast<uint16_t>(((1u << exp_bits) - 1u) << man_bits); }
  uint16_t sign_bit() const { return static_cast<uint16_t>(1u << (exp_bits + man_bits)); }
};
inline constexpr Format kF16{5, 10};
inline constexpr Format kBF16{8, 7};

inline bool is_nan_bits(uint16_t h, Format f) {
  const uint16_t a = h & static_cast<uint16_t>(f.sign_bit() - 1u);
  return a > f.inf_bits();
}

// The value of bit pattern h, by the textbook formula.
inline double decode(uint16_t h, Format f) {
  const bool neg = (h & f.sign_bit()) != 0;
  const int e = (h >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = h & ((1 << f.man_bits) - 1);
  double v;
  if (e == (1 << f.exp_bits) - 1)
    v = m ? std::nan("") : INFINITY;
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), 1 - f.bias() - f.man_bits);
  else
    v = std::ldexp(static_cast<double>(m + (1 << f.man_bits)), e - f.bias() - f.man_bits);
  return neg ? -v : v;
}

// Magnitude of pattern p for 0 <= p <= inf_bits, where the inf pattern counts as 2^(bias+1): the
// next value after the largest finite one (the one overflow rounds towards).
inline double magnitude(uint16_t p, Format f) {
  return p == f.inf_bits() ? std::ldexp(1.0, f.bias() + 1) : decode(p, f);
}

// x rounded to nearest, ties to even, in one step.  NaN gives the canonical quiet NaN.
inline uint16_t round_to(double x, Format f) {
  if (std::isnan(x)) return static_cast<uint16_t>(f.inf_bits() | (1u << (f.man_bits - 1)));
  const uint16_t sign = std::signbit(x) ? f.sign_bit() : 0;
  const double a = std::fabs(x);
  if (a >= magnitude(f.inf_bits(), f)) return sign | f.inf_bits();
  // Largest p in [0, inf) with magnitude(p) <= a (magnitudes grow with the pattern).
  uint32_t lo = 0, hi = f.inf_bits();  // magnitude(lo) <= a < magnitude(hi)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (magnitude(static_cast<uint16_t>(mid), f) <= a)
      lo = mid;
    else
      hi = mid;
  }
  // Both differences are exact: a and the neighbours lie within one unit of the format.
  const double below = a - magnitude(static_cast<uint16_t>(lo), f);
  const double above = magnitude(static_cast<uint16_t>(hi), f) - a;
  uint32_t p = lo;
  if (above < below || (above == below && (lo & 1u))) p = hi;
  return static_cast<uint16_t>(sign | p);
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- a tensor over owned storage ---------------------------------------------------------------

struct Buf {
  PL_Tensor t{};
  std::vector<uint64_t> storage;  // 8-byte aligned

  Buf(PL_DType dtype, int64_t n) : storage(static_cast<size_t>(n) + 1) {
    t.struct_size = sizeof(PL_Tensor);
    t.data = n > 0 ? storage.data() : nullptr;
    t.dtype = dtype;
    t.device = PL_Device{PL_DEVICE_CPU, 0};
    t.numel = n;
    t.ndim = 1;
    t.shape[0] = n;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&&) = default;
  PL_Tensor* get() {
    t.data = t.numel > 0 ? storage.data() : nullptr;
    return &t;
  }
  int64_t n() const { return t.numel; }
  void* raw() { return storage.data(); }

  // Element i as a double (exact for every dtype but int64 beyond 2^53).
  double at(int64_t i) const {
    const void* p = storage.data();
    switch (t.dtype) {
      case PL_F32:
        return static_cast<const float*>(p)[i];
      case PL_F64:
        return static_cast<const double*>(p)[i];
      case PL_F16:
        return decode(static_cast<const uint16_t*>(p)[i], kF16);
      case PL_BF16:
        return decode(static_cast<const uint16_t*>(p)[i], kBF16);
      case PL_I32:
        return static_cast<const int32_t*>(p)[i];
      case PL_I64:
        return static_cast<double>(static_cast<const int64_t*>(p)[i]);
      case PL_U8:
        return static_cast<const uint8_t*>(p)[i];
      default:
        ADD_FAILURE() << "bad dtype";
        return 0;
    }
  }
  // Stores v rounded once to the dtype (integers: v must already be representable).
  void set(int64_t i, double v) {
    void* p = storage.data();
    switch (t.dtype) {
      case PL_F32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case PL_F64:
        static_cast<double*>(p)[i] = v;
        break;
      case PL_F16:
        static_cast<uint16_t*>(p)[i] = round_to(v, kF16);
        break;
      case PL_BF16:
        static_cast<uint16_t*>(p)[i] = round_to(v, kBF16);
        break;
      case PL_I32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      case PL_I64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
      case PL_U8:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
      default:
        ADD_FAILURE() << "bad dtype";
    }
  }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(storage.data());
  }
};

// Rounds a float-computed value to the dtype the way a store does (f64: no rounding).
inline double round_store(double v, PL_DType dtype) {
  switch (dtype) {
    case PL_F32:
      return static_cast<float>(v);
    case PL_F16:
      return decode(round_to(v, kF16), kF16);
    case PL_BF16:
      return decode(round_to(v, kBF16), kBF16);
    default:
      return v;
  }
}

inline bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Runs f, which must throw plrt::plugin::Failure with `code` and a message containing every needle.
template <class F>
void expect_failure(F&& f, PL_ErrorCode code, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected a Failure with code " << code << ", but the call succeeded";
  } catch (const plrt::plugin::Failure& e) {
    EXPECT_EQ(e.code, code) << e.message;
    for (const auto& n : needles)
      EXPECT_NE(e.message.find(n), std::string::npos) << "'" << n << "' not in: " << e.message;
  }
}

inline const char* dtype_name(PL_DType d) { return pl_dtype_name(d); }

}  // namespace ref
