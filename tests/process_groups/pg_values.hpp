// The data of the multi-process collective tests: per-dtype storage (f16/bf16 included), the value
// rank r holds at index i for each kind of operation, and the answer computed locally.
//
// Every value is exact in its dtype, and so is every partial sum a reduction can form in any
// order, so results are compared exactly; only float averages allow one unit in the last place
// (a plugin may multiply by 1/W instead of dividing).
#pragma once

#include <plrt/pl_process_group.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace pgtest {

// ---- f16 / bf16 storage ----
struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf, nan
  if (exp == 0) {                                                        // zero, subnormal
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

// Round to nearest even; the test data never overflows or underflows f16.
inline uint16_t float_to_half(float f) {
  uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                               // subnormal or zero
    float v = bits_float(a) * 16777216.0f;                             // in units of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(v)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r - (112u << 23)) >> 13));
}

inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // nan
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- traits: T is the storage type; L the exact "logical" type values are computed in ----
template <class T>
struct Traits;
template <class T>
struct FloatTraits {
  using L = double;
  static constexpr bool is_float = true;
};
template <class T>
struct IntTraits {
  using L = int64_t;
  static constexpr bool is_float = false;
  static L load(T v) { return static_cast<L>(v); }
  static T store(L v) { return static_cast<T>(v); }
  static constexpr double ulp = 0;
};
template <>
struct Traits<float> : FloatTraits<float> {
  static constexpr PL_DType dtype = PL_F32;
  static constexpr double ulp = 0x1p-23;
  static double load(float v) { return v; }
  static float store(double v) { return static_cast<float>(v); }
};
template <>
struct Traits<double> : FloatTraits<double> {
  static constexpr PL_DType dtype = PL_F64;
  static constexpr double ulp = 0x1p-52;
  static double load(double v) { return v; }
  static double store(double v) { return v; }
};
template <>
struct Traits<f16> : FloatTraits<f16> {
  static constexpr PL_DType dtype = PL_F16;
  static constexpr double ulp = 0x1p-10;
  static double load(f16 v) { return half_to_float(v.bits); }
  static f16 store(double v) { return {float_to_half(static_cast<float>(v))}; }
};
template <>
struct Traits<bf16> : FloatTraits<bf16> {
  static constexpr PL_DType dtype = PL_BF16;
  static constexpr double ulp = 0x1p-7;
  static double load(bf16 v) { return bf16_to_float(v.bits); }
  static bf16 store(double v) { return {float_to_bf16(static_cast<float>(v))}; }
};
template <>
struct Traits<int32_t> : IntTraits<int32_t> {
  static constexpr PL_DType dtype = PL_I32;
};
template <>
struct Traits<int64_t> : IntTraits<int64_t> {
  static constexpr PL_DType dtype = PL_I64;
};
template <>
struct Traits<uint8_t> : IntTraits<uint8_t> {
  static constexpr PL_DType dtype = PL_U8;
};

template <class T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<T>{}) with the storage type of `dtype`; false for an unknown dtype.
template <class Fn>
bool with_dtype(PL_DType dtype, Fn&& fn) {
  switch (dtype) {
    case PL_F32:
      fn(Tag<float>{});
      return true;
    case PL_F64:
      fn(Tag<double>{});
      return true;
    case PL_F16:
      fn(Tag<f16>{});
      return true;
    case PL_BF16:
      fn(Tag<bf16>{});
      return true;
    case PL_I32:
      fn(Tag<int32_t>{});
      return true;
    case PL_I64:
      fn(Tag<int64_t>{});
      return true;
    case PL_U8:
      fn(Tag<uint8_t>{});
      return true;
    default:
      return false;
  }
}

// ---- the data ----
// Plain: data movement (broadcast, allgather, send/recv); the others feed one reduction.
enum class Kind {
  Plain,
  Sum,
  Avg,
  MinMax,
  Product
};

inline Kind kind_of(PL_ReduceOp op) {
  switch (op) {
    case PL_REDUCE_SUM:
      return Kind::Sum;
    case PL_REDUCE_AVG:
      return Kind::Avg;
    case PL_REDUCE_PRODUCT:
      return Kind::Product;
    default:
      return Kind::MinMax;
  }
}

inline const char* reduce_name(PL_ReduceOp op) {
  switch (op) {
    case PL_REDUCE_SUM:
      return "sum";
    case PL_REDUCE_AVG:
      return "avg";
    case PL_REDUCE_MIN:
      return "min";
    case PL_REDUCE_MAX:
      return "max";
    case PL_REDUCE_PRODUCT:
      return "product";
    default:
      return "?";
  }
}

// A small pattern in [0, mod) that differs between neighbouring indices and between ranks.
inline int64_t pat(int64_t i, int r, int64_t mod) { return (i * 7 + r * 13 + 5) % mod; }

// The value rank r of W holds at index i.
template <class T>
typename Traits<T>::L input(Kind k, int r, int W, int64_t i) {
  constexpr PL_DType dt = Traits<T>::dtype;
  switch (k) {
    case Kind::Plain:
      switch (dt) {
        case PL_U8:
          return pat(i, r, 251);
        case PL_I32:
          return static_cast<int32_t>(static_cast<uint32_t>(i * 2654435761LL + r * 40503LL));
        case PL_I64:
          return static_cast<int64_t>(static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + r * 0x100000001ull);
        case PL_F32:
          return (pat(i, r, 20011) - 10000) * 0.125;
        case PL_F64:
          return (pat(i, r, 1000003) - 500000) * 1e6 + 0.5;  // needs more than f32's 24 bits
        case PL_F16:
          return (pat(i, r, 2001) - 1000) * 0.5;
        default:
          return pat(i, r, 257) - 128;  // bf16: integers up to 128
      }
    case Kind::Sum:  // no partial sum overflows (u8 wraps, as in PyTorch) or loses a bit
      switch (dt) {
        case PL_U8:
          return pat(i, r, 256);
        case PL_I32:
          return (pat(i, r, 1001) - 500) * 1000000;
        case PL_I64:
          return (pat(i, r, 1001) - 500) * 1000000000000000LL + r;
        case PL_F32:
          return (pat(i, r, 100003) - 50000) * 0.25;
        case PL_F64:
          return (pat(i, r, 1000003) - 500000) * 1e6 + 0.5 * r;
        case PL_F16:
          return (pat(i, r, 257) - 128) * 0.25;
        default:
          return (pat(i, r, 33) - 16) * 0.5;
      }
    case Kind::Avg:
      switch (dt) {
        case PL_U8:
          return 200 + pat(i, r, 56);  // the sum overflows u8: the plugin must not
        case PL_I32:                   // ... nor i32; negative sums round toward zero
          return i % 3 == 0 ? std::numeric_limits<int32_t>::min() + pat(i, r, 1000)
                            : std::numeric_limits<int32_t>::max() - pat(i, r, 1000);
        case PL_I64:
          return (pat(i, r, 1001) - 500) * 1000000000000000LL + pat(i, r, 7) - 3;
        default: {
          // floats: a(i) plus terms that cancel over the ranks, so the average is exactly a(i)
          double b = static_cast<double>((i + r) % W - (i + r + 1) % W);
          if (dt == PL_F32) return (pat(i, 0, 100003) - 50000) * 0.25 + b;
          if (dt == PL_F64) return (pat(i, 0, 1000003) - 500000) * 1e6 + 0.5 + b;
          if (dt == PL_F16) return (pat(i, 0, 129) - 64) * 0.25 + b;
          return (pat(i, 0, 33) - 16) * 0.5 + b;
        }
      }
    case Kind::MinMax:
      switch (dt) {
        case PL_U8:
          return pat(i, r, 29) * 8;
        case PL_I32:
          return (pat(i, r, 29) - 14) * 100000000;
        case PL_I64:
          return (pat(i, r, 29) - 14) * 100000000000000000LL;
        default:
          return (pat(i, r, 29) - 14) * 0.5;
      }
    case Kind::Product: {  // values in {1, 2}, some negative: |product| <= 2^W
      int64_t v = 1 + pat(i, r, 2);
      if (dt != PL_U8 && pat(i, r, 5) == 0) v = -v;
      return static_cast<typename Traits<T>::L>(v);
    }
  }
  return 0;
}

// The reduction `op` over the W ranks' values at index i.
template <class T>
typename Traits<T>::L expected(PL_ReduceOp op, int W, int64_t i) {
  using L = typename Traits<T>::L;
  const Kind k = kind_of(op);
  L acc = input<T>(k, 0, W, i);
  for (int r = 1; r < W; ++r) {
    L v = input<T>(k, r, W, i);
    switch (op) {
      case PL_REDUCE_MIN:
        acc = v < acc ? v : acc;
        break;
      case PL_REDUCE_MAX:
        acc = v > acc ? v : acc;
        break;
      case PL_REDUCE_PRODUCT:
        acc *= v;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == PL_REDUCE_AVG) acc /= W;  // integers: truncated toward zero
  if (op == PL_REDUCE_SUM && Traits<T>::dtype == PL_U8) acc = static_cast<L>(static_cast<uint8_t>(acc));
  return acc;
}

template <class L>
std::string show(L v) {
  if constexpr (std::is_floating_point_v<L>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  } else {
    return std::to_string(v);
  }
}

}  // namespace pgtest
