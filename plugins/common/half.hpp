// IEEE 754 binary16 (f16) and bfloat16 (bf16) <-> binary32/binary64 conversions, bit-exact and
// portable (integer bit manipulation; no compiler half type, no FP environment assumptions beyond
// the default).  Shared by the cpu accelerator's kernels, the process groups' host reductions
// (plrt_pg_core) and their tests: it lives in plugins/common so that neither reaches into the
// other's folder.
//
// Every narrowing conversion rounds to nearest, ties to even, in ONE step from the source value:
//  - finite values too large for the target become +-inf (IEEE overflow under round-to-nearest:
//    anything >= max + ulp/2 rounds to inf, the tie included because max has an odd significand);
//  - values in the target's subnormal range round to the nearest subnormal (or to +-0, or up to the
//    smallest normal) — no flush to zero;
//  - the sign of zero is kept;
//  - NaN stays NaN: sign and the top payload bits are kept and the quiet bit is set, so a
//    signalling NaN comes back quiet and no NaN ever turns into inf.
// f64 -> f16 and f64 -> bf16 round directly from the double (no double rounding through f32).
// Widening conversions (f16/bf16 -> f32) are exact, NaN payloads included.
#pragma once

#include <cstdint>
#include <cstring>

namespace plrt::cpu {

inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint64_t f64_to_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// ---- bfloat16: the upper 16 bits of an f32 ----------------------------------------------------

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: keep sign and top payload, force the quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Round to nearest even on the raw bits: add 0x7FFF plus the lowest kept bit, then truncate.
  // The carry runs into the exponent, which handles subnormal -> normal and max -> inf.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// ---- binary16 ---------------------------------------------------------------------------------

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return f32_from_bits(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    const float v = static_cast<float>(mant) * 0x1.0p-24f;
    return f32_from_bits(sign | f32_to_bits(v));
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));  // rebias 15 -> 127
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {  // inf or NaN
    if (a == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x03FFu));
  }
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 = max + ulp/2
  if (a >= 0x38800000u) {                                              // >= 2^-14: a normal f16
    uint32_t r = a - (112u << 23);                                     // rebias 127 -> 15
    r += 0x0FFFu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // Subnormal f16 (unit 2^-24).  The value is mant * 2^(exp-150); in units of 2^-24 that is
  // mant >> (126 - exp), rounded half to even.
  const uint32_t exp = a >> 23;
  if (exp < 102u) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exp;  // 14 .. 24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal: right
  return static_cast<uint16_t>(sign | q);
}

// ---- from binary64, rounding once --------------------------------------------------------------

namespace detail {
// Rounds `x` to a binary format with kExpBits exponent and kManBits stored significand bits
// (f16: 5/10, bf16: 8/7) and returns its bit pattern.
template <int kExpBits, int kManBits>
inline uint16_t narrow_from_f64(double x) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kEmin = 1 - kBias;
  constexpr uint32_t kInf = ((1u << kExpBits) - 1u) << kManBits;
  const uint64_t u = f64_to_bits(x);
  const uint32_t sign = static_cast<uint32_t>(u >> 63) << (kExpBits + kManBits);
  const int e = static_cast<int>((u >> 52) & 0x7FFu);
  const uint64_t frac = u & ((uint64_t{1} << 52) - 1u);
  if (e == 0x7FF) {
    if (frac == 0) return static_cast<uint16_t>(sign | kInf);
    return static_cast<uint16_t>(sign | kInf | (1u << (kManBits - 1)) | static_cast<uint32_t>(frac >> (52 - kManBits)));
  }
  if (e == 0) return static_cast<uint16_t>(sign);  // +-0 or an f64 subnormal (< 2^-1022): zero
  const int exp = e - 1023;                        // value = sig * 2^(exp - 52)
  if (exp > kBias) return static_cast<uint16_t>(sign | kInf);
  const uint64_t sig = frac | (uint64_t{1} << 52);
  // Shift that leaves the target's significand (in units of the target ulp at this exponent).
  const int shift = 52 - kManBits + (exp < kEmin ? kEmin - exp : 0);
  if (shift >= 54) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  uint64_t q = sig >> shift;
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1u);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  // Normal: q carries the implicit bit, which adds one to the biased exponent (exp + kBias - 1);
  // a carry out of the significand moves on into the exponent, up to inf.  Subnormal: q is the
  // encoding (q == 2^kManBits is the smallest normal).
  const uint64_t bits = exp < kEmin ? q : (static_cast<uint64_t>(exp + kBias - 1) << kManBits) + q;
  if (bits >= kInf) return static_cast<uint16_t>(sign | kInf);
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(bits));
}
}  // namespace detail

inline uint16_t f64_to_f16(double x) { return detail::narrow_from_f64<5, 10>(x); }
inline uint16_t f64_to_bf16(double x) { return detail::narrow_from_f64<8, 7>(x); }

inline double f16_to_f64(uint16_t h) { return static_cast<double>(f16_to_f32(h)); }
inline double bf16_to_f64(uint16_t h) { return static_cast<double>(bf16_to_f32(h)); }

}  // namespace plrt::cpu
