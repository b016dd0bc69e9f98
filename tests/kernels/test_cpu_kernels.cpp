// fill, scale, axpy, cast of the CPU kernels, every dtype they take, against reference loops
// written here (conversions from reference.hpp, integer wrap-around with 128-bit arithmetic), and
// their error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "reference.hpp"

using ref::Buf;
using ref::expect_failure;

namespace {

const int64_t kSizes[] = {0, 1, 7, 1000, 4099};
const PL_DType kAllDtypes[] = {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8};
const PL_DType kFloatDtypes[] = {PL_F32, PL_F64, PL_F16, PL_BF16};
const PL_DType kIntDtypes[] = {PL_I32, PL_I64, PL_U8};

bool is_float(PL_DType d) { return d == PL_F32 || d == PL_F64 || d == PL_F16 || d == PL_BF16; }

// Random contents: floats in [-100, 100] (rounded to the dtype), integers over the full range.
void randomize(Buf& b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-100.0, 100.0);
  for (int64_t i = 0; i < b.n(); ++i) {
    const uint64_t r = rng();
    switch (b.t.dtype) {
      case PL_I32:
        b.as<int32_t>()[i] = static_cast<int32_t>(static_cast<uint32_t>(r));
        break;
      case PL_I64:
        b.as<int64_t>()[i] = static_cast<int64_t>(r);
        break;
      case PL_U8:
        b.as<uint8_t>()[i] = static_cast<uint8_t>(r);
        break;
      default:
        b.set(i, real(rng));
        break;
    }
  }
}

// An integer element as a signed 128-bit value.
__int128 int_at(Buf& b, int64_t i) {
  switch (b.t.dtype) {
    case PL_I32:
      return b.as<int32_t>()[i];
    case PL_I64:
      return b.as<int64_t>()[i];
    default:
      return b.as<uint8_t>()[i];
  }
}

// v reduced modulo 2^bits into the dtype's range.
__int128 wrap(__int128 v, PL_DType d) {
  const int bits = d == PL_I32 ? 32 : d == PL_I64 ? 64 : 8;
  const __int128 mod = static_cast<__int128>(1) << bits;
  __int128 r = v % mod;
  if (r < 0) r += mod;
  if (d != PL_U8 && r >= mod / 2) r -= mod;
  return r;
}

template <class Expected>
void expect_elements(Buf& b, Expected&& expected, const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < b.n() && failures < 5; ++i) {
    if (is_float(b.t.dtype)) {
      const double want = expected(i);
      if (!ref::same_value(b.at(i), want)) {
        ADD_FAILURE() << what << " [" << i << "]: got " << b.at(i) << ", want " << want;
        ++failures;
      }
    } else {
      const __int128 want = expected(i);
      if (int_at(b, i) != want) {
        ADD_FAILURE() << what << " [" << i << "]: got " << static_cast<long long>(int_at(b, i)) << ", want "
                      << static_cast<long long>(want);
        ++failures;
      }
    }
  }
}

std::string label(PL_DType d, int64_t n) { return std::string(pl_dtype_name(d)) + "[" + std::to_string(n) + "]"; }

// float(a) * float(b) etc., the compute type of a float dtype.
double mul_c(double a, double b, PL_DType d) {
  return d == PL_F64 ? a * b : static_cast<double>(static_cast<float>(a) * static_cast<float>(b));
}
double axpy_c(double y, double alpha, double x, PL_DType d) {
  if (d == PL_F64) return y + alpha * x;
  return static_cast<double>(static_cast<float>(y) + static_cast<float>(alpha) * static_cast<float>(x));
}

}  // namespace

// ---- fill ----

TEST(CpuFill, FloatDtypesRoundOnceFromDouble) {
  const double values[] = {0.1, -3.75, 1e6, -1e-7, 1.0 + 0x1p-11 + 0x1p-40, INFINITY, std::nan("")};
  for (PL_DType d : kFloatDtypes)
    for (int64_t n : kSizes)
      for (double v : values) {
        Buf x(d, n);
        randomize(x, 1);
        plrt::cpu::fill(x.get(), v);
        expect_elements(
            x, [&](int64_t) { return ref::round_store(v, d); }, "fill " + label(d, n));
        if (d == PL_F16 && v == 1e6 && n > 0) {
          EXPECT_TRUE(std::isinf(x.at(0)));
        }
      }
}

TEST(CpuFill, IntegerDtypes) {
  struct Case {
    PL_DType d;
    double v;
  };
  const Case cases[] = {{PL_I32, 0},       {PL_I32, -7},     {PL_I32, 2147483647.0},   {PL_I32, -2147483648.0},
                        {PL_I64, -0x1p63}, {PL_I64, 0x1p62}, {PL_I64, 123456789012.0}, {PL_U8, 0},
                        {PL_U8, 255},      {PL_U8, 17}};
  for (const Case& c : cases)
    for (int64_t n : kSizes) {
      Buf x(c.d, n);
      randomize(x, 2);
      plrt::cpu::fill(x.get(), c.v);
      expect_elements(
          x, [&](int64_t) { return static_cast<__int128>(c.v); }, "fill " + label(c.d, n));
    }
}

// ---- scale ----

TEST(CpuScale, FloatDtypes) {
  for (PL_DType d : kFloatDtypes)
    for (int64_t n : kSizes)
      for (double alpha : {0.37, -2.5, 0.0, 1e-3}) {
        Buf x(d, n);
        randomize(x, 3);
        std::vector<double> before(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) before[i] = x.at(i);
        plrt::cpu::scale(x.get(), alpha);
        expect_elements(
            x, [&](int64_t i) { return ref::round_store(mul_c(before[i], alpha, d), d); }, "scale " + label(d, n));
      }
}

TEST(CpuScale, IntegerDtypesWrap) {
  for (PL_DType d : kIntDtypes)
    for (int64_t n : kSizes)
      for (double alpha : {3.0, -1.0, 0.0, 0x1p33 + 5, -0x1p63}) {
        Buf x(d, n);
        randomize(x, 4);
        std::vector<__int128> before(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) before[i] = int_at(x, i);
        plrt::cpu::scale(x.get(), alpha);
        const __int128 a = static_cast<__int128>(alpha);
        expect_elements(
            x, [&](int64_t i) { return wrap(before[i] * a, d); }, "scale " + label(d, n));
      }
}

TEST(CpuScale, Uint8MinusOneWrapsLikeTorch) {
  Buf x(PL_U8, 3);
  x.as<uint8_t>()[0] = 3;
  x.as<uint8_t>()[1] = 0;
  x.as<uint8_t>()[2] = 255;
  plrt::cpu::scale(x.get(), -1.0);
  EXPECT_EQ(x.as<uint8_t>()[0], 253);
  EXPECT_EQ(x.as<uint8_t>()[1], 0);
  EXPECT_EQ(x.as<uint8_t>()[2], 1);
  Buf y(PL_I32, 1);
  y.as<int32_t>()[0] = 2147483647;
  plrt::cpu::scale(y.get(), 2.0);
  EXPECT_EQ(y.as<int32_t>()[0], -2);
}

// ---- axpy ----

TEST(CpuAxpy, FloatDtypes) {
  for (PL_DType d : kFloatDtypes)
    for (int64_t n : kSizes)
      for (double alpha : {0.5, -1.25, 3e-3}) {
        Buf y(d, n), x(d, n);
        randomize(y, 5);
        randomize(x, 6);
        std::vector<double> before(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) before[i] = y.at(i);
        plrt::cpu::axpy(y.get(), alpha, x.get());
        expect_elements(
            y, [&](int64_t i) { return ref::round_store(axpy_c(before[i], alpha, x.at(i), d), d); },
            "axpy " + label(d, n));
      }
}

TEST(CpuAxpy, IntegerDtypesWrap) {
  for (PL_DType d : kIntDtypes)
    for (int64_t n : kSizes)
      for (double alpha : {1.0, -3.0, 0x1p40 + 1}) {
        Buf y(d, n), x(d, n);
        randomize(y, 7);
        randomize(x, 8);
        std::vector<__int128> before(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) before[i] = int_at(y, i);
        plrt::cpu::axpy(y.get(), alpha, x.get());
        const __int128 a = static_cast<__int128>(alpha);
        expect_elements(
            y, [&](int64_t i) { return wrap(before[i] + a * int_at(x, i), d); }, "axpy " + label(d, n));
      }
}

// ---- cast ----

TEST(CpuCast, AllFloatPairsRoundOnce) {
  for (PL_DType s : kFloatDtypes)
    for (PL_DType d : kFloatDtypes)
      for (int64_t n : kSizes) {
        Buf src(s, n), dst(d, n);
        randomize(src, 9);
        std::mt19937_64 rng(10);
        // Sprinkle special values: huge, tiny, signed zero, NaN, inf, and (for f64) doubles just off
        // f16/bf16 ties that rounding through f32 would get wrong.
        const double specials[] = {1e5,
                                   -7e4,
                                   3e-6,
                                   -1e-40,
                                   -0.0,
                                   std::nan(""),
                                   -INFINITY,
                                   1.0 + 0x1p-11 + 0x1p-40,
                                   1.0 + 0x1p-8 + 0x1p-40,
                                   65520.0,
                                   3.3e38};
        for (int64_t i = 0; i < n; i += 3) src.set(i, specials[rng() % std::size(specials)]);
        plrt::cpu::cast(dst.get(), src.get());
        expect_elements(
            dst, [&](int64_t i) { return ref::round_store(src.at(i), d); },
            std::string("cast ") + pl_dtype_name(s) + " -> " + label(d, n));
        for (int64_t i = 0; i < n; ++i)
          if (src.at(i) == 0 && !std::signbit(src.at(i)) != !std::signbit(dst.at(i)))
            ADD_FAILURE() << "cast lost the sign of zero at " << i;
      }
}

TEST(CpuCast, F64ToHalfIsDirect) {
  Buf src(PL_F64, 2), h(PL_F16, 2), b(PL_BF16, 2);
  src.as<double>()[0] = 1.0 + 0x1p-11 + 0x1p-40;
  src.as<double>()[1] = 1.0 + 0x1p-8 + 0x1p-40;
  plrt::cpu::cast(h.get(), src.get());
  plrt::cpu::cast(b.get(), src.get());
  EXPECT_EQ(h.as<uint16_t>()[0], 0x3C01u);
  EXPECT_EQ(b.as<uint16_t>()[1], 0x3F81u);
}

// ---- errors ----

TEST(CpuElementwiseErrors, IntegralScalarRule) {
  Buf i32(PL_I32, 4), i64(PL_I64, 4), u8(PL_U8, 4);
  expect_failure([&] { plrt::cpu::fill(i32.get(), 2.5); }, PL_ERR_INVALID_ARGUMENT, {"2.5", "int32", "whole number"});
  expect_failure([&] { plrt::cpu::fill(u8.get(), 256); }, PL_ERR_INVALID_ARGUMENT, {"256", "uint8", "[0, 255]"});
  expect_failure([&] { plrt::cpu::fill(u8.get(), -1); }, PL_ERR_INVALID_ARGUMENT, {"-1", "uint8", "[0, 255]"});
  expect_failure([&] { plrt::cpu::fill(i32.get(), 2147483648.0); }, PL_ERR_INVALID_ARGUMENT,
                 {"2147483648", "int32", "[-2147483648, 2147483647]"});
  expect_failure([&] { plrt::cpu::fill(i64.get(), 0x1p63); }, PL_ERR_INVALID_ARGUMENT,
                 {"9223372036854775808", "int64", "out of range"});
  expect_failure([&] { plrt::cpu::fill(i32.get(), std::nan("")); }, PL_ERR_INVALID_ARGUMENT, {"nan", "int32"});
  expect_failure([&] { plrt::cpu::scale(i64.get(), 0.5); }, PL_ERR_INVALID_ARGUMENT,
                 {"alpha 0.5", "int64", "integral"});
  expect_failure([&] { plrt::cpu::scale(i32.get(), 1e30); }, PL_ERR_INVALID_ARGUMENT, {"1e+30", "out of range"});
  expect_failure([&] { plrt::cpu::scale(u8.get(), INFINITY); }, PL_ERR_INVALID_ARGUMENT, {"inf", "uint8"});
  Buf x8(PL_U8, 4);
  expect_failure([&] { plrt::cpu::axpy(u8.get(), std::nan(""), x8.get()); }, PL_ERR_INVALID_ARGUMENT, {"nan", "uint8"});
  expect_failure([&] { plrt::cpu::axpy(u8.get(), 0.25, x8.get()); }, PL_ERR_INVALID_ARGUMENT, {"0.25", "uint8"});
  // Integral values outside the dtype are fine for arithmetic (they wrap), and numel 0 still
  // checks the scalar.
  plrt::cpu::scale(u8.get(), 1000.0);
  Buf empty(PL_I32, 0);
  expect_failure([&] { plrt::cpu::fill(empty.get(), 0.5); }, PL_ERR_INVALID_ARGUMENT, {"0.5"});
}

TEST(CpuElementwiseErrors, Descriptors) {
  Buf a(PL_F32, 7), b(PL_F32, 8), c(PL_F64, 7);
  expect_failure([&] { plrt::cpu::axpy(a.get(), 1.0, b.get()); }, PL_ERR_INVALID_ARGUMENT, {"7", "8", "x", "y"});
  expect_failure([&] { plrt::cpu::axpy(a.get(), 1.0, c.get()); }, PL_ERR_INVALID_ARGUMENT, {"float32", "float64"});
  expect_failure([&] { plrt::cpu::fill(nullptr, 1.0); }, PL_ERR_INVALID_ARGUMENT, {"x", "NULL"});
  expect_failure([&] { plrt::cpu::axpy(a.get(), 1.0, nullptr); }, PL_ERR_INVALID_ARGUMENT, {"x", "NULL"});

  Buf nodata(PL_F32, 7);
  nodata.t.data = nullptr;
  expect_failure([&] { plrt::cpu::scale(&nodata.t, 2.0); }, PL_ERR_INVALID_ARGUMENT, {"data is NULL", "7"});

  Buf dev(PL_F32, 7);
  dev.t.device = PL_Device{PL_DEVICE_CUDA, 1};
  expect_failure([&] { plrt::cpu::fill(&dev.t, 1.0); }, PL_ERR_INVALID_ARGUMENT, {"cuda:1", "cpu"});
  expect_failure([&] { plrt::cpu::axpy(a.get(), 1.0, &dev.t); }, PL_ERR_INVALID_ARGUMENT, {"x", "cuda:1"});

  Buf bad(PL_F32, 7);
  bad.t.dtype = 99;
  expect_failure([&] { plrt::cpu::fill(&bad.t, 1.0); }, PL_ERR_INVALID_ARGUMENT, {"99", "float32"});

  Buf neg(PL_F32, 7);
  neg.t.numel = -3;
  expect_failure([&] { plrt::cpu::fill(&neg.t, 1.0); }, PL_ERR_INVALID_ARGUMENT, {"-3"});

  Buf old(PL_F32, 7);
  old.t.struct_size = 8;
  expect_failure([&] { plrt::cpu::fill(&old.t, 1.0); }, PL_ERR_VERSION, {"struct_size 8"});

  // numel 0 with NULL data is a valid no-op.
  Buf e1(PL_BF16, 0), e2(PL_BF16, 0);
  plrt::cpu::axpy(e1.get(), 2.0, e2.get());
  plrt::cpu::fill(e1.get(), 1.0);
}

TEST(CpuElementwiseErrors, Cast) {
  Buf f(PL_F32, 5), i(PL_I32, 5), u(PL_U8, 5), g(PL_F16, 6);
  expect_failure([&] { plrt::cpu::cast(f.get(), i.get()); }, PL_ERR_UNSUPPORTED, {"int32", "float32"});
  expect_failure([&] { plrt::cpu::cast(u.get(), f.get()); }, PL_ERR_UNSUPPORTED, {"uint8"});
  expect_failure([&] { plrt::cpu::cast(g.get(), f.get()); }, PL_ERR_INVALID_ARGUMENT, {"5", "6", "src", "dst"});
  Buf d(PL_F64, 5);
  d.t.device = PL_Device{PL_DEVICE_CUDA, 0};
  expect_failure([&] { plrt::cpu::cast(f.get(), &d.t); }, PL_ERR_INVALID_ARGUMENT, {"src", "cuda:0"});
}
