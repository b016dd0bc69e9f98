// ABI 1.5's gradient clipping kernels on the cpu reference: sum_squares against a long double sum
// of the exactly decoded values (reference.hpp, independent of half.hpp), exact where every square
// and partial sum is exact; clamp against a per-element reference with the bounds rounded by the
// test's own rounding; and every argument error, named.
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

const PL_DType kFloats[] = {PL_F64, PL_F32, PL_F16, PL_BF16};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Buf out_f64(double v) {
  Buf b(PL_F64, 1);
  b.set(0, v);
  return b;
}

// Uniform values in [lo, hi], each rounded once to the dtype by Buf::set.
Buf random_buf(PL_DType d, int64_t n, std::mt19937_64& rng, double lo, double hi) {
  Buf b(d, n);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) b.set(i, u(rng));
  return b;
}

// The bits of element i (f16/bf16: 2 bytes, f32: 4, f64: 8).
uint64_t bits_of(const Buf& b, int64_t i) {
  uint64_t out = 0;
  const size_t s = pl_dtype_size(b.t.dtype);
  std::memcpy(&out, reinterpret_cast<const unsigned char*>(b.storage.data()) + static_cast<size_t>(i) * s, s);
  return out;
}

// ---- sum_squares ----

TEST(ClipSumSquares, MatchesALongDoubleSumWithinDoubleRounding) {
  std::mt19937_64 rng(41);
  for (PL_DType d : kFloats)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1000}, int64_t{100003}}) {
      Buf x = random_buf(d, n, rng, -3, 3);
      long double want = 0.25L;  // out starts at 0.25: the kernel adds to it
      long double bound = 0.25L;
      for (int64_t i = 0; i < n; ++i) {
        const long double v = x.at(i);
        want += v * v;
        bound += v * v;
      }
      Buf out = out_f64(0.25);
      plrt::cpu::sum_squares(x.get(), out.get());
      // n + 2 roundings of double at most, each within 2^-53 of a partial sum <= bound.
      const double tol = static_cast<double>(n + 2) * 0x1p-53 * static_cast<double>(bound);
      EXPECT_NEAR(out.at(0), static_cast<double>(want), tol) << ref::dtype_name(d) << " n=" << n;
    }
}

TEST(ClipSumSquares, ExactWhereEverySumIsExactAndWidensBeforeSquaring) {
  for (PL_DType d : kFloats) {
    // Small integers: every square and sum is exact in double, whatever the order.
    const int64_t n = 37;
    Buf x(d, n);
    double want = 1.0;
    for (int64_t i = 0; i < n; ++i) {
      x.set(i, static_cast<double>(i % 11) - 5);
      want += x.at(i) * x.at(i);
    }
    Buf out = out_f64(1.0);
    plrt::cpu::sum_squares(x.get(), out.get());
    EXPECT_EQ(out.at(0), want) << ref::dtype_name(d);
    // Called again: out collects both (one out for many tensors).
    plrt::cpu::sum_squares(x.get(), out.get());
    EXPECT_EQ(out.at(0), 2 * want - 1) << ref::dtype_name(d);
  }
  // Squares beyond the dtype's range stay finite in double: f32 3e38, f16 60000, bf16 1e38.
  const std::pair<PL_DType, double> big[] = {{PL_F32, 3e38}, {PL_F16, 60000}, {PL_BF16, 1e38}};
  for (const auto& [d, v] : big)
    for (int64_t n : {int64_t{2}, int64_t{19}}) {  // shorter than one round of partial sums, and longer
      Buf x(d, n);
      for (int64_t i = 0; i < n; ++i) x.set(i, i % 2 ? -v : v);
      Buf out = out_f64(0);
      plrt::cpu::sum_squares(x.get(), out.get());
      const double s = x.at(0);
      EXPECT_TRUE(std::isfinite(out.at(0))) << ref::dtype_name(d) << " n=" << n;
      EXPECT_NEAR(out.at(0), static_cast<double>(n) * s * s, 1e-15 * static_cast<double>(n) * s * s)
          << ref::dtype_name(d) << " n=" << n;
    }
  // The smallest subnormals square exactly in double.
  Buf h(PL_F16, 1), b(PL_BF16, 1);
  h.set(0, std::ldexp(1.0, -24));
  b.set(0, std::ldexp(1.0, -133));
  Buf oh = out_f64(0), ob = out_f64(0);
  plrt::cpu::sum_squares(h.get(), oh.get());
  plrt::cpu::sum_squares(b.get(), ob.get());
  EXPECT_EQ(oh.at(0), std::ldexp(1.0, -48));
  EXPECT_EQ(ob.at(0), std::ldexp(1.0, -266));
}

TEST(ClipSumSquares, NonFiniteElementsAndEmptyTensors) {
  for (PL_DType d : kFloats) {
    Buf x(d, 10);
    for (int64_t i = 0; i < 10; ++i) x.set(i, 1);
    x.set(3, -INFINITY);
    Buf out = out_f64(0);
    plrt::cpu::sum_squares(x.get(), out.get());
    EXPECT_EQ(out.at(0), INFINITY) << ref::dtype_name(d);
    x.set(7, kNaN);
    Buf out2 = out_f64(0);
    plrt::cpu::sum_squares(x.get(), out2.get());
    EXPECT_TRUE(std::isnan(out2.at(0))) << ref::dtype_name(d);
    Buf none(d, 0);
    Buf out3 = out_f64(4.5);
    plrt::cpu::sum_squares(none.get(), out3.get());
    EXPECT_EQ(out3.at(0), 4.5) << "numel 0 adds nothing";
  }
}

TEST(ClipSumSquares, EveryArgumentErrorNamesIt) {
  Buf x(PL_F32, 4), out = out_f64(0), xi(PL_I64, 4), o32(PL_F32, 1), o2(PL_F64, 2), o0(PL_F64, 0);
  auto ss = [](Buf& x_, PL_Tensor* o) { plrt::cpu::sum_squares(x_.get(), o); };
  expect_failure([&] { ss(xi, out.get()); }, PL_ERR_UNSUPPORTED,
                 {"sum_squares", "x has dtype int64", "float32, float64, float16, bfloat16"});
  expect_failure([&] { ss(x, o32.get()); }, PL_ERR_INVALID_ARGUMENT, {"sum_squares: out is float32", "float64"});
  expect_failure([&] { ss(x, o2.get()); }, PL_ERR_INVALID_ARGUMENT, {"out has 2 elements", "exactly 1"});
  expect_failure([&] { ss(x, o0.get()); }, PL_ERR_INVALID_ARGUMENT, {"out has 0 elements", "exactly 1"});
  expect_failure([&] { ss(x, nullptr); }, PL_ERR_INVALID_ARGUMENT, {"sum_squares: out", "NULL"});
  expect_failure([&] { plrt::cpu::sum_squares(nullptr, out.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"sum_squares: x", "NULL"});
  Buf out_gpu = out_f64(0);
  out_gpu.t.device = {PL_DEVICE_CUDA, 0};
  expect_failure([&] { ss(x, out_gpu.get()); }, PL_ERR_INVALID_ARGUMENT, {"out is on cuda:0"});
  Buf x_gpu(PL_F32, 4);
  x_gpu.t.device = {PL_DEVICE_CUDA, 1};
  expect_failure([&] { ss(x_gpu, out.get()); }, PL_ERR_INVALID_ARGUMENT, {"x is on cuda:1"});
  Buf old(PL_F32, 4);
  old.t.struct_size = 8;
  expect_failure([&] { ss(old, out.get()); }, PL_ERR_VERSION, {"x", "struct_size 8"});
  Buf xd(PL_F64, 4);
  PL_Tensor inside = *out.get();
  inside.data = xd.as<double>() + 1;  // out is one of x's elements
  expect_failure([&] { ss(xd, &inside); }, PL_ERR_INVALID_ARGUMENT, {"out overlaps x"});
}

// ---- clamp ----

// lo rounded to the dtype as the reference rounds (f32: the double -> float conversion).
double bound_in(double v, PL_DType d) { return ref::round_store(v, d); }

TEST(ClipClamp, MatchesAnElementwiseReferenceAndKeepsBits) {
  std::mt19937_64 rng(43);
  const std::pair<double, double> bounds[] = {{-0.1, 0.1},      {-1.0, 2.5},      {0.0, 0.0},
                                              {-INFINITY, 0.3}, {-0.3, INFINITY}, {-1e6, 1e6}};
  for (PL_DType d : kFloats)
    for (const auto& [lo, hi] : bounds) {
      const int64_t n = 203;
      Buf x = random_buf(d, n, rng, -3, 3);
      x.set(0, kNaN);
      x.set(1, -0.0);
      x.set(2, 0.0);
      x.set(3, INFINITY);
      x.set(4, -INFINITY);
      x.set(5, lo);  // exactly the rounded bound: unchanged
      x.set(6, hi);
      std::vector<uint64_t> before(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) before[static_cast<size_t>(i)] = bits_of(x, i);
      const std::vector<double> v0 = [&] {
        std::vector<double> v;
        for (int64_t i = 0; i < n; ++i) v.push_back(x.at(i));
        return v;
      }();
      plrt::cpu::clamp(x.get(), lo, hi);
      const double rlo = bound_in(lo, d), rhi = bound_in(hi, d);
      for (int64_t i = 0; i < n; ++i) {
        const double v = v0[static_cast<size_t>(i)];
        const std::string where = std::string(ref::dtype_name(d)) + " [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "] element " + std::to_string(i) + " = " + std::to_string(v);
        if (std::isnan(v) || (v >= rlo && v <= rhi)) {
          EXPECT_EQ(bits_of(x, i), before[static_cast<size_t>(i)]) << where << ": must keep its bits";
        } else {
          EXPECT_EQ(x.at(i), v < rlo ? rlo : rhi) << where;
        }
      }
    }
}

TEST(ClipClamp, BoundsAreRoundedOnceToTheDtype) {
  // 0.1 is not exact in any of them: the clamped value is the bound's nearest representation.
  for (PL_DType d : kFloats) {
    Buf x(d, 3);
    x.set(0, 5);
    x.set(1, -5);
    x.set(2, 0.05);
    plrt::cpu::clamp(x.get(), -0.1, 0.1);
    EXPECT_EQ(x.at(0), bound_in(0.1, d)) << ref::dtype_name(d);
    EXPECT_EQ(x.at(1), bound_in(-0.1, d)) << ref::dtype_name(d);
    EXPECT_EQ(x.at(2), bound_in(0.05, d)) << ref::dtype_name(d);
  }
  // f16: 1e5 rounds to inf, so nothing finite is above it; -1e5 to -inf.
  Buf h(PL_F16, 2);
  h.set(0, 60000);
  h.set(1, -60000);
  plrt::cpu::clamp(h.get(), -1e5, 1e5);
  EXPECT_EQ(h.at(0), 60000);
  EXPECT_EQ(h.at(1), -60000);
  Buf none(PL_F32, 0);
  plrt::cpu::clamp(none.get(), -1, 1);  // numel 0: nothing to do
}

TEST(ClipClamp, EveryArgumentErrorNamesIt) {
  Buf x(PL_F32, 4), xi(PL_I32, 4), xu(PL_U8, 4);
  expect_failure([&] { plrt::cpu::clamp(x.get(), 1, -1); }, PL_ERR_INVALID_ARGUMENT,
                 {"clamp: lo 1 is greater than hi -1", "lo <= hi"});
  expect_failure([&] { plrt::cpu::clamp(x.get(), kNaN, 1); }, PL_ERR_INVALID_ARGUMENT,
                 {"clamp: bounds lo nan and hi 1", "must not be NaN"});
  expect_failure([&] { plrt::cpu::clamp(x.get(), -1, kNaN); }, PL_ERR_INVALID_ARGUMENT, {"hi nan", "must not be NaN"});
  expect_failure([&] { plrt::cpu::clamp(xi.get(), -1, 1); }, PL_ERR_UNSUPPORTED,
                 {"clamp: x has dtype int32", "float32, float64, float16, bfloat16"});
  expect_failure([&] { plrt::cpu::clamp(xu.get(), 0, 1); }, PL_ERR_UNSUPPORTED, {"x has dtype uint8"});
  expect_failure([&] { plrt::cpu::clamp(nullptr, -1, 1); }, PL_ERR_INVALID_ARGUMENT, {"clamp: x", "NULL"});
  Buf x_gpu(PL_F32, 4);
  x_gpu.t.device = {PL_DEVICE_CUDA, 0};
  expect_failure([&] { plrt::cpu::clamp(x_gpu.get(), -1, 1); }, PL_ERR_INVALID_ARGUMENT, {"x is on cuda:0"});
  // Nothing was written by a refused call.
  x.set(0, 7);
  expect_failure([&] { plrt::cpu::clamp(x.get(), 1, -1); }, PL_ERR_INVALID_ARGUMENT, {"lo 1"});
  EXPECT_EQ(x.at(0), 7);
}

}  // namespace
