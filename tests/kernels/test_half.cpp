// half.hpp: f16 and bf16 <-> f32/f64, against the independent references of reference.hpp (and,
// where the compiler has _Float16, against its conversions too).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>

#include "half.hpp"
#include "reference.hpp"

using namespace plrt::cpu;
using ref::kBF16;
using ref::kF16;

namespace {

uint16_t f16_of(float f) { return f32_to_f16(f); }
uint16_t bf16_of_bits(uint32_t u) { return f32_to_bf16(ref::from_bits(u)); }
uint16_t f16_of_bits(uint32_t u) { return f32_to_f16(ref::from_bits(u)); }

}  // namespace

// ---- exhaustive over all 65536 patterns ----

TEST(Half, F16DecodeAndRoundTripAllPatterns) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float f = f16_to_f32(b);
    const double d = ref::decode(b, kF16);
    if (ref::is_nan_bits(b, kF16)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // NaN stays NaN: sign and payload kept, quiet bit set.
      ASSERT_EQ(f32_to_f16(f), b | 0x0200u) << std::hex << h;
      ASSERT_EQ(f64_to_f16(static_cast<double>(f)), b | 0x0200u) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), d) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_f16(f), b) << std::hex << h;
    ASSERT_EQ(f64_to_f16(d), b) << std::hex << h;
  }
}

TEST(Half, Bf16DecodeAndRoundTripAllPatterns) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float f = bf16_to_f32(b);
    const double d = ref::decode(b, kBF16);
    if (ref::is_nan_bits(b, kBF16)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(f32_to_bf16(f), b | 0x0040u) << std::hex << h;
      ASSERT_EQ(f64_to_bf16(static_cast<double>(f)), b | 0x0040u) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), d) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(f), b) << std::hex << h;
    ASSERT_EQ(f64_to_bf16(d), b) << std::hex << h;
  }
}

// ---- hand-picked cases ----

TEST(Half, Bf16TiesToEven) {
  EXPECT_EQ(bf16_of_bits(0x3F808000u), 0x3F80u);  // tie, 0x3F80 even: down
  EXPECT_EQ(bf16_of_bits(0x3F818000u), 0x3F82u);  // tie, 0x3F81 odd: up
  EXPECT_EQ(bf16_of_bits(0x3F808001u), 0x3F81u);  // above the tie
  EXPECT_EQ(bf16_of_bits(0x3F807FFFu), 0x3F80u);  // below the tie
  EXPECT_EQ(bf16_of_bits(0xBF808000u), 0xBF80u);
  EXPECT_EQ(bf16_of_bits(0xBF818000u), 0xBF82u);
  EXPECT_EQ(bf16_of_bits(0x3FFF8000u), 0x4000u);  // carry into the exponent
}

TEST(Half, F16TiesToEven) {
  // 1 + 2^-11 is halfway between 1 (0x3C00) and 1 + 2^-10 (0x3C01).
  EXPECT_EQ(f16_of_bits(0x3F801000u), 0x3C00u);
  EXPECT_EQ(f16_of_bits(0x3F803000u), 0x3C02u);  // 1 + 3*2^-11: halfway 0x3C01/0x3C02
  EXPECT_EQ(f16_of_bits(0x3F801001u), 0x3C01u);
  EXPECT_EQ(f16_of_bits(0x3F800FFFu), 0x3C00u);
  EXPECT_EQ(f16_of_bits(0xBF801000u), 0xBC00u);
  EXPECT_EQ(f16_of(2049.0f), 0x6800u);  // halfway 2048/2050: 2048
  EXPECT_EQ(f16_of(2051.0f), 0x6802u);  // halfway 2050/2052: 2052
  EXPECT_EQ(f16_of(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02u);
}

TEST(Half, OverflowToInfinity) {
  EXPECT_EQ(f16_of(65504.0f), 0x7BFFu);
  EXPECT_EQ(f16_of(65519.996f), 0x7BFFu);
  EXPECT_EQ(f16_of(65520.0f), 0x7C00u);  // max + ulp/2: the tie goes to inf (max is odd)
  EXPECT_EQ(f16_of(-65520.0f), 0xFC00u);
  EXPECT_EQ(f16_of(1e10f), 0x7C00u);
  EXPECT_EQ(f16_of(FLT_MAX), 0x7C00u);
  EXPECT_EQ(f16_of(INFINITY), 0x7C00u);
  EXPECT_EQ(f16_of(-INFINITY), 0xFC00u);
  EXPECT_EQ(f64_to_f16(65519.999999), 0x7BFFu);
  EXPECT_EQ(f64_to_f16(65520.0), 0x7C00u);
  EXPECT_EQ(f64_to_f16(1e300), 0x7C00u);
  EXPECT_EQ(f64_to_f16(-1e300), 0xFC00u);

  EXPECT_EQ(bf16_of_bits(0x7F7F7FFFu), 0x7F7Fu);
  EXPECT_EQ(bf16_of_bits(0x7F7F8000u), 0x7F80u);  // tie at max: inf
  EXPECT_EQ(bf16_of_bits(0x7F7FFFFFu), 0x7F80u);
  EXPECT_EQ(bf16_of_bits(0xFF7FFFFFu), 0xFF80u);
  EXPECT_EQ(f64_to_bf16(1e300), 0x7F80u);
  EXPECT_EQ(f64_to_bf16(-1e39), 0xFF80u);
  EXPECT_EQ(f64_to_bf16(3.3e38), 0x7F78u);  // finite in bf16 (max ~3.39e38)
}

TEST(Half, SubnormalsAndZero) {
  EXPECT_EQ(f16_of(0x1p-24f), 0x0001u);             // smallest f16 subnormal
  EXPECT_EQ(f16_of(0x1p-25f), 0x0000u);             // tie with 0: even
  EXPECT_EQ(f16_of(0x1.000002p-25f), 0x0001u);      // just above the tie
  EXPECT_EQ(f16_of(0x1.8p-24f), 0x0002u);           // 1.5 units: tie, to 2
  EXPECT_EQ(f16_of(0x1.4p-23f), 0x0002u);           // 2.5 units: tie, to 2
  EXPECT_EQ(f16_of(0x1p-14f - 0x1p-25f), 0x0400u);  // tie 0x3FF/0x400: to the smallest normal
  EXPECT_EQ(f16_of(0x1p-14f), 0x0400u);
  EXPECT_EQ(f16_of(0x1.ff8p-15f), 0x03FFu);  // largest subnormal: 1023 * 2^-24
  EXPECT_EQ(f16_of(1e-30f), 0x0000u);
  EXPECT_EQ(f16_of(-1e-30f), 0x8000u);
  EXPECT_EQ(f16_of(FLT_TRUE_MIN), 0x0000u);
  EXPECT_EQ(f16_to_f32(0x0001u), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x83FFu), -0x1.ff8p-15f);
  EXPECT_EQ(f64_to_f16(0x1p-25), 0x0000u);
  EXPECT_EQ(f64_to_f16(0x1.0000000000001p-25), 0x0001u);
  EXPECT_EQ(f64_to_f16(4.9e-324), 0x0000u);

  EXPECT_EQ(bf16_of_bits(0x00000001u), 0x0000u);
  EXPECT_EQ(bf16_of_bits(0x00008000u), 0x0000u);  // tie with 0
  EXPECT_EQ(bf16_of_bits(0x00008001u), 0x0001u);
  EXPECT_EQ(bf16_of_bits(0x00018000u), 0x0002u);
  EXPECT_EQ(bf16_of_bits(0x007F8000u), 0x0080u);  // up into the smallest normal
  EXPECT_EQ(bf16_to_f32(0x0001u), 0x1p-133f);
  EXPECT_EQ(f64_to_bf16(0x1p-133), 0x0001u);
  EXPECT_EQ(f64_to_bf16(0x1p-134), 0x0000u);
  EXPECT_EQ(f64_to_bf16(0x1.0000000000001p-134), 0x0001u);
  EXPECT_EQ(f64_to_bf16(1e-300), 0x0000u);

  EXPECT_EQ(f16_of(0.0f), 0x0000u);
  EXPECT_EQ(f16_of(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000u);
  EXPECT_EQ(f64_to_f16(-0.0), 0x8000u);
  EXPECT_EQ(f64_to_bf16(-0.0), 0x8000u);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000u)));
  EXPECT_TRUE(std::signbit(bf16_to_f32(0x8000u)));
}

TEST(Half, NanStaysNan) {
  const float snan = ref::from_bits(0x7F800001u);  // signalling; truncation would give inf
  EXPECT_EQ(f32_to_bf16(snan), 0x7FC0u);
  EXPECT_EQ(f16_of(snan), 0x7E00u);
  EXPECT_EQ(f32_to_bf16(ref::from_bits(0xFFC00000u)), 0xFFC0u);
  EXPECT_EQ(f16_of(ref::from_bits(0xFFC00000u)), 0xFE00u);
  EXPECT_TRUE(ref::is_nan_bits(f64_to_f16(std::nan("")), kF16));
  EXPECT_TRUE(ref::is_nan_bits(f64_to_bf16(-std::nan("")), kBF16));
  EXPECT_TRUE(ref::is_nan_bits(f64_to_bf16(std::numeric_limits<double>::signaling_NaN()), kBF16));
  EXPECT_EQ(f64_to_f16(INFINITY), 0x7C00u);
  EXPECT_EQ(f64_to_bf16(-INFINITY), 0xFF80u);
}

// ---- sweeps against the table-search reference ----

TEST(Half, F32ToF16MatchesReferenceSweep) {
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu, 0x0A5Bu};
  for (uint32_t k = 0; k < (1u << 19); ++k) {
    for (uint32_t low : lows) {
      const uint32_t u = (k << 13) | low;
      const float f = ref::from_bits(u);
      const uint16_t got = f32_to_f16(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(ref::is_nan_bits(got, kF16)) << std::hex << u;
        continue;
      }
      ASSERT_EQ(got, ref::round_to(f, kF16)) << std::hex << "f32 bits " << u;
    }
  }
}

TEST(Half, F32ToBf16MatchesReferenceSweep) {
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, 0x3A7Cu};
  for (uint32_t k = 0; k <= 0xFFFFu; ++k) {
    for (uint32_t low : lows) {
      const uint32_t u = (k << 16) | low;
      const float f = ref::from_bits(u);
      const uint16_t got = f32_to_bf16(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(ref::is_nan_bits(got, kBF16)) << std::hex << u;
        continue;
      }
      ASSERT_EQ(got, ref::round_to(f, kBF16)) << std::hex << "f32 bits " << u;
    }
  }
}

// Halfway points between neighbours and the doubles right next to them: rounding through f32
// first would turn "just above the tie" into the tie (double rounding) and get these wrong.
TEST(Half, F64RoundsDirectlyNotThroughF32) {
  for (const ref::Format fmt : {kF16, kBF16}) {
    const auto narrow = [&](double d) { return fmt.man_bits == 10 ? f64_to_f16(d) : f64_to_bf16(d); };
    for (uint32_t h = 0; h < fmt.inf_bits(); ++h) {
      const double lo = ref::decode(static_cast<uint16_t>(h), fmt);
      const double hi = ref::magnitude(static_cast<uint16_t>(h + 1), fmt);
      const double tie = lo + (hi - lo) / 2;         // exact
      const auto up = static_cast<uint16_t>(h + 1);  // the inf pattern past the largest finite
      const uint16_t even = (h & 1u) ? up : static_cast<uint16_t>(h);
      ASSERT_EQ(narrow(tie), even) << std::hex << h;
      ASSERT_EQ(narrow(std::nextafter(tie, INFINITY)), up) << std::hex << h;
      ASSERT_EQ(narrow(std::nextafter(tie, 0.0)), h) << std::hex << h;
      ASSERT_EQ(narrow(-std::nextafter(tie, INFINITY)), up | fmt.sign_bit()) << std::hex << h;
    }
  }
  // The classic double-rounding trap, spelled out: 1 + 2^-11 + 2^-40 rounds to f32 as 1 + 2^-11
  // (a tie for f16, which then goes down to 1), but directly it is above the tie: 0x3C01.
  EXPECT_EQ(f64_to_f16(1.0 + 0x1p-11 + 0x1p-40), 0x3C01u);
  EXPECT_EQ(f64_to_bf16(1.0 + 0x1p-8 + 0x1p-40), 0x3F81u);
}

TEST(Half, F64MatchesReferenceRandom) {
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<uint64_t> mant(0, (uint64_t{1} << 52) - 1);
  for (const ref::Format fmt : {kF16, kBF16}) {
    std::uniform_int_distribution<int> ex(-fmt.bias() - fmt.man_bits - 3, fmt.bias() + 2);
    for (int i = 0; i < 200000; ++i) {
      const double d = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant(rng)), -52), ex(rng)) * (i & 1 ? -1 : 1);
      const uint16_t got = fmt.man_bits == 10 ? f64_to_f16(d) : f64_to_bf16(d);
      ASSERT_EQ(got, ref::round_to(d, fmt)) << d;
    }
  }
}

#ifdef __FLT16_MAX__
// A second, unrelated reference: the compiler's own _Float16 conversions (libgcc soft-fp).
TEST(Half, AgreesWithCompilerFloat16) {
  std::mt19937 rng(99);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = rng();
    const float f = ref::from_bits(u);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(f32_to_f16(f), hb) << std::hex << u;
    const double d = static_cast<double>(f) * (1.0 + 0x1p-30);  // off the f32 grid
    const _Float16 hd = static_cast<_Float16>(d);
    std::memcpy(&hb, &hd, 2);
    ASSERT_EQ(f64_to_f16(d), hb) << d;
  }
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    _Float16 x;
    const auto b = static_cast<uint16_t>(h);
    std::memcpy(&x, &b, 2);
    const float want = static_cast<float>(x);
    if (!std::isnan(want)) {
      ASSERT_EQ(f16_to_f32(b), want) << std::hex << h;
    }
  }
}
#endif
