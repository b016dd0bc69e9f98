// ABI 1.3 on the cpu kernels: f16/bf16 layer math (f32 accumulation, rounded once) and
// unscale_check, against reference loops that widen to double and round once (reference.hpp's
// rounding, written independently of half.hpp); and both entries through the plugin's C table.
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "matrix_reference.hpp"
#include "reference.hpp"

using ref::Buf;
using ref::expect_failure;
using ref::fill_random;
using ref::mat;
using ref::values;

namespace {

const PL_DType kHalves[] = {PL_F16, PL_BF16};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

ref::Format format_of(PL_DType d) { return d == PL_F16 ? ref::kF16 : ref::kBF16; }

uint16_t bits16(const Buf& b, int64_t i) { return reinterpret_cast<const uint16_t*>(b.storage.data())[i]; }

// The spacing of the format's values at |v| (the subnormal spacing near zero).
double ulp(double v, PL_DType d) {
  const ref::Format f = format_of(d);
  const int min_exp = 1 - f.bias();
  const int e = v == 0 ? min_exp : std::max(std::ilogb(v), min_exp);
  return std::ldexp(1.0, e - f.man_bits);
}

// got must be `want` (exact, in double) rounded once, give or take the float accumulation error
// (at most `f32_err`): |got - want| <= f32_err + half an ulp of the result.
void expect_half_ulp(double got, double want, double f32_err, PL_DType d, const std::string& where) {
  const double tol = f32_err + 0.5 * ulp(std::fabs(want) + f32_err, d);
  EXPECT_LE(std::fabs(got - want), tol) << ref::dtype_name(d) << " " << where << ": got " << got << ", want " << want;
}

// ---- gemm ----

TEST(AmpGemm, HalvesMatchDoubleWithinHalfAnUlpForEveryTranspose) {
  std::mt19937_64 rng(17);
  for (PL_DType d : kHalves) {
    ref::for_each_gemm_shape({1, 7, 33, 67}, [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
      const double alpha = 1.5, beta = -0.75;  // exact in float: alpha, beta add no rounding
      ref::RandomGemm g(d, ta, tb, m, n, k, alpha, beta, rng);
      plrt::cpu::gemm(ta, tb, alpha, g.a.get(), g.b.get(), beta, g.c.get());
      const std::string where = "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " m=" + std::to_string(m) +
                                " n=" + std::to_string(n) + " k=" + std::to_string(k);
      for (int64_t i = 0; i < g.c.n(); ++i)
        expect_half_ulp(g.c.at(i), g.want[i], (k + 2) * 0x1p-23 * g.bound[i], d,
                        where + " [" + std::to_string(i) + "]");
      return !HasFailure();  // one failing case says enough
    });
    if (HasFailure()) return;
  }
}

// Integer operands make every float sum exact, so the result must be the exact value rounded
// once, ties to even (f16: 2049 -> 2048, 2051 -> 2052; bf16: 257 -> 256, 259 -> 260).
TEST(AmpGemm, ExactSumsAreRoundedOnceTiesToEven) {
  std::mt19937_64 rng(5);
  for (PL_DType d : kHalves)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t m = 5, n = 9, k = 61;
      ref::GemmOperands g(d, ta, tb, m, n, k);
      Buf &a = g.a, &b = g.b, &c = g.c;
      for (int64_t i = 0; i < a.n(); ++i) a.set(i, static_cast<double>(static_cast<int>(rng() % 17) - 4));
      for (int64_t i = 0; i < b.n(); ++i) b.set(i, static_cast<double>(static_cast<int>(rng() % 13) - 2));
      for (int64_t i = 0; i < c.n(); ++i) c.set(i, static_cast<double>(static_cast<int>(rng() % 64)));
      std::vector<double> want = values(c), bound;
      ref::ref_gemm(ta, tb, m, n, k, 2.0, values(a), values(b), 0.5, want, bound);
      plrt::cpu::gemm(ta, tb, 2.0, a.get(), b.get(), 0.5, c.get());
      for (int64_t i = 0; i < c.n(); ++i)
        ASSERT_EQ(bits16(c, i), ref::round_to(want[i], format_of(d)))
            << ref::dtype_name(d) << " t=" << t << " [" << i << "]: exact " << want[i] << ", got " << c.at(i);
    }
  for (PL_DType d : kHalves) {
    const double base = d == PL_F16 ? 2048 : 256;  // ulp 2 above this
    Buf a = mat(d, 2, 2), b = mat(d, 2, 1), c = mat(d, 2, 1);
    for (int i = 0; i < 4; ++i) a.set(i, i % 2 ? 1 : base);  // rows [base, 1]
    a.set(2, base);
    a.set(3, 3);  // second row [base, 3]
    b.set(0, 1);
    b.set(1, 1);
    plrt::cpu::gemm(0, 0, 1.0, a.get(), b.get(), 0.0, c.get());
    EXPECT_EQ(c.at(0), base) << ref::dtype_name(d);      // base + 1: a tie, to even
    EXPECT_EQ(c.at(1), base + 4) << ref::dtype_name(d);  // base + 3: a tie, to even
  }
}

TEST(AmpGemm, BetaZeroOnlyWritesCAndEmptyInnerSizeScales) {
  for (PL_DType d : kHalves) {
    ref::SmallGemm small(d);
    for (int i = 0; i < 4; ++i) small.c.set(i, kNaN);
    plrt::cpu::gemm(0, 0, 2.0, small.a.get(), small.b.get(), 0.0, small.c.get());
    EXPECT_EQ(values(small.c), (std::vector<double>{40, 28, 112, 82})) << ref::dtype_name(d);

    Buf e = mat(d, 2, 0), f = mat(d, 0, 3), g = mat(d, 2, 3);
    for (int i = 0; i < 6; ++i) g.set(i, i + 0.5);
    plrt::cpu::gemm(0, 0, 1.0, e.get(), f.get(), 0.5, g.get());  // k == 0: c = beta * c
    EXPECT_EQ(values(g), (std::vector<double>{0.25, 0.75, 1.25, 1.75, 2.25, 2.75})) << ref::dtype_name(d);
    g.set(0, kNaN);
    plrt::cpu::gemm(0, 0, 1.0, e.get(), f.get(), 0.0, g.get());
    EXPECT_EQ(values(g), std::vector<double>(6, 0.0)) << ref::dtype_name(d);
  }
  // Overflow rounds to inf like any f16 store: 300 * 300 > 65504.
  Buf a = mat(PL_F16, 1, 1), b = mat(PL_F16, 1, 1), c = mat(PL_F16, 1, 1);
  a.set(0, 300);
  b.set(0, 300);
  plrt::cpu::gemm(0, 0, 1.0, a.get(), b.get(), 0.0, c.get());
  EXPECT_EQ(c.at(0), INFINITY);
}

TEST(AmpGemm, MixedHalfDtypesAreRefusedNamingBoth) {
  Buf a = mat(PL_F16, 3, 4), b = mat(PL_BF16, 4, 2), c = mat(PL_F16, 3, 2), bf = mat(PL_F16, 4, 2);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), b.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"float16", "bfloat16", "same dtype"});
  Buf c32 = mat(PL_F32, 3, 2);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), bf.get(), 0, c32.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"c is float32", "float16"});
  Buf c_bad = mat(PL_F16, 2, 3);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), bf.get(), 0, c_bad.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"c has shape [2, 3]", "[3, 2]"});
}

// ---- add_bias, sum_rows ----

TEST(AmpAddBias, ExactlyTheSumRoundedOnce) {
  std::mt19937_64 rng(23);
  for (PL_DType d : kHalves) {
    const int64_t rows = 13, cols = 37;
    Buf y = mat(d, rows, cols), bias = mat(d, cols);
    fill_random(y, rng, -4, 4);
    fill_random(bias, rng, -4, 4);
    y.set(0, 65504);  // f16 max + 32: rounds to inf in f16; in bf16 a plain value
    bias.set(0, 32);
    y.set(1, kNaN);
    const std::vector<double> y0 = values(y), b0 = values(bias);
    plrt::cpu::add_bias(y.get(), bias.get());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t o = i * cols + j;
        const uint16_t want = ref::round_to(y0[o] + b0[j], format_of(d));
        if (ref::is_nan_bits(want, format_of(d)))
          EXPECT_TRUE(ref::is_nan_bits(bits16(y, o), format_of(d))) << ref::dtype_name(d) << " [" << o << "]";
        else
          EXPECT_EQ(bits16(y, o), want) << ref::dtype_name(d) << " [" << o << "]: " << y0[o] << " + " << b0[j];
      }
  }
  Buf y = mat(PL_F16, 3, 5), b = mat(PL_BF16, 5);
  expect_failure([&] { plrt::cpu::add_bias(y.get(), b.get()); }, PL_ERR_INVALID_ARGUMENT, {"float16", "bfloat16"});
}

TEST(AmpSumRows, FloatSumsInRowOrderRoundedOnce) {
  std::mt19937_64 rng(29);
  for (PL_DType d : kHalves)
    for (double beta : {0.0, -1.25}) {
      const int64_t rows = 53, cols = 19;
      const double alpha = 0.3;  // not exact in float: the kernel uses (float)0.3
      Buf x = mat(d, rows, cols), out = mat(d, cols);
      fill_random(x, rng, -2, 2);
      fill_random(out, rng);
      if (beta == 0) out.set(3, kNaN);  // only written
      const std::vector<double> out0 = values(out);
      plrt::cpu::sum_rows(alpha, x.get(), beta, out.get());
      const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
      for (int64_t j = 0; j < cols; ++j) {
        // The documented arithmetic, bit for bit: float sums over i in order, then one rounding.
        float s = 0;
        double exact = 0, bound = 0;
        for (int64_t i = 0; i < rows; ++i) {
          s = s + static_cast<float>(x.at(i * cols + j));
          exact += x.at(i * cols + j);
          bound += std::fabs(x.at(i * cols + j));
        }
        const float r = beta == 0 ? fa * s : fa * s + fb * static_cast<float>(out0[j]);
        EXPECT_EQ(bits16(out, j), ref::round_to(r, format_of(d)))
            << ref::dtype_name(d) << " beta " << beta << " [" << j << "]";
        // And within half an ulp of the exact double result, plus float's accumulation error.
        const double want = static_cast<double>(fa) * exact + (beta == 0 ? 0 : static_cast<double>(fb) * out0[j]);
        const double err = (rows + 3) * 0x1p-24 * (std::fabs(fa) * bound + (beta == 0 ? 0 : std::fabs(fb * out0[j])));
        expect_half_ulp(out.at(j), want, err, d, "sum_rows [" + std::to_string(j) + "]");
      }
    }
  Buf x = mat(PL_BF16, 4, 3), o = mat(PL_F16, 3), o4 = mat(PL_BF16, 4);
  expect_failure([&] { plrt::cpu::sum_rows(1, x.get(), 0, o.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"bfloat16", "float16"});
  expect_failure([&] { plrt::cpu::sum_rows(1, x.get(), 0, o4.get()); }, PL_ERR_INVALID_ARGUMENT, {"[4, 3]", "[4]"});
}

// ---- relu, relu_backward ----

TEST(AmpRelu, CopiesValuesAsStoredAndZeroesNegatives) {
  for (PL_DType d : kHalves) {
    const ref::Format f = format_of(d);
    const int64_t n = 23;  // odd: no vector width divides it
    Buf x = mat(d, n), y = mat(d, n), dy = mat(d, n), dx = mat(d, n);
    std::mt19937_64 rng(31);
    fill_random(x, rng, -3, 3);
    fill_random(dy, rng, -3, 3);
    x.set(0, -0.0);
    x.set(1, kNaN);
    x.set(2, -INFINITY);
    x.set(3, INFINITY);
    x.set(4, std::ldexp(1.0, d == PL_F16 ? -24 : -133));  // the smallest subnormal
    x.set(5, -std::ldexp(1.0, d == PL_F16 ? -24 : -133));
    dy.set(7, kNaN);
    plrt::cpu::relu(x.get(), y.get());
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t xi = bits16(x, i);
      const bool negative = !ref::is_nan_bits(xi, f) && x.at(i) < 0;
      EXPECT_EQ(bits16(y, i), negative ? 0 : xi) << ref::dtype_name(d) << " [" << i << "] x=" << x.at(i);
    }
    plrt::cpu::relu_backward(y.get(), dy.get(), dx.get());
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(bits16(dx, i), y.at(i) > 0 ? bits16(dy, i) : 0) << ref::dtype_name(d) << " [" << i << "]";
    // In place: y may be x, dx may be dy.
    const std::vector<uint16_t> want_y(reinterpret_cast<const uint16_t*>(y.storage.data()),
                                       reinterpret_cast<const uint16_t*>(y.storage.data()) + n);
    const std::vector<uint16_t> want_dx(reinterpret_cast<const uint16_t*>(dx.storage.data()),
                                        reinterpret_cast<const uint16_t*>(dx.storage.data()) + n);
    plrt::cpu::relu(x.get(), x.get());
    plrt::cpu::relu_backward(y.get(), dy.get(), dy.get());
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bits16(x, i), want_y[i]) << i;
      EXPECT_EQ(bits16(dy, i), want_dx[i]) << i;
    }
  }
  Buf h = mat(PL_F16, 2, 3), b = mat(PL_BF16, 2, 3), h6 = mat(PL_F16, 6);
  expect_failure([&] { plrt::cpu::relu(h.get(), b.get()); }, PL_ERR_INVALID_ARGUMENT, {"float16", "bfloat16"});
  expect_failure([&] { plrt::cpu::relu(h.get(), h6.get()); }, PL_ERR_INVALID_ARGUMENT, {"[2, 3]", "[6]"});
  expect_failure([&] { plrt::cpu::relu_backward(h.get(), b.get(), h.get()); }, PL_ERR_INVALID_ARGUMENT, {"bfloat16"});
}

TEST(AmpLayers, LossAndArgmaxStayF32F64) {
  Buf x = mat(PL_F16, 2, 3), loss = mat(PL_F16, 2), lab = mat(PL_I64, 2), out = mat(PL_I64, 2);
  expect_failure([&] { plrt::cpu::cross_entropy(x.get(), lab.get(), loss.get(), nullptr, 1); }, PL_ERR_UNSUPPORTED,
                 {"logits has dtype float16", "supported: float32, float64"});
  expect_failure([&] { plrt::cpu::argmax_rows(x.get(), out.get()); }, PL_ERR_UNSUPPORTED,
                 {"x has dtype float16", "supported: float32, float64"});
}

// ---- unscale_check ----

const PL_DType kAllFloats[] = {PL_F64, PL_F32, PL_F16, PL_BF16};

// x * inv_scale as the kernel documents it: inv_scale in the compute type, one rounding on store.
// (For f16/bf16 the float product rounds first; with 24 >= 2p + 2 bits that second rounding is
// innocuous, so rounding the exact product once gives the same.)
double ref_unscale(double x, double inv, PL_DType d) {
  if (d == PL_F64) return x * inv;
  return ref::round_store(x * static_cast<double>(static_cast<float>(inv)), d);
}

Buf flag(float v) {
  Buf f(PL_F32, 1);
  f.as<float>()[0] = v;
  return f;
}

TEST(AmpUnscaleCheck, FiniteDataIsScaledExactlyAndLeavesTheFlag) {
  std::mt19937_64 rng(37);
  for (PL_DType d : kAllFloats)
    for (double inv : {1.0 / 65536, 0.3, 3.0}) {
      Buf x = mat(d, 101), found = flag(0);
      fill_random(x, rng, -1000, 1000);
      const std::vector<double> x0 = values(x);
      plrt::cpu::unscale_check(x.get(), inv, found.get());
      EXPECT_EQ(found.as<float>()[0], 0.0f) << ref::dtype_name(d);
      for (int64_t i = 0; i < x.n(); ++i)
        ASSERT_EQ(x.at(i), ref_unscale(x0[i], inv, d)) << ref::dtype_name(d) << " inv " << inv << " [" << i << "]";
    }
}

TEST(AmpUnscaleCheck, OneInfOrNaNAnywhereSetsTheFlagAndLaterCallsNeverClearIt) {
  for (PL_DType d : kAllFloats)
    for (double bad : {double(INFINITY), -double(INFINITY), kNaN})
      for (int64_t at : {int64_t{0}, int64_t{16}, int64_t{32}}) {
        const std::string where =
            std::string(ref::dtype_name(d)) + " bad " + std::to_string(bad) + " at " + std::to_string(at);
        Buf x = mat(d, 33), found = flag(0);
        for (int64_t i = 0; i < x.n(); ++i) x.set(i, i - 10.0);
        x.set(at, bad);
        plrt::cpu::unscale_check(x.get(), 0.5, found.get());
        EXPECT_EQ(found.as<float>()[0], 1.0f) << where;
        for (int64_t i = 0; i < x.n(); ++i) {  // every element is still scaled
          if (i == at) continue;
          EXPECT_EQ(x.at(i), (i - 10.0) * 0.5) << where << " [" << i << "]";
        }
        EXPECT_TRUE(ref::same_value(x.at(at), bad * 0.5)) << where;

        Buf clean = mat(d, 5);
        for (int64_t i = 0; i < 5; ++i) clean.set(i, i);
        plrt::cpu::unscale_check(clean.get(), 2.0, found.get());
        EXPECT_EQ(found.as<float>()[0], 1.0f) << where << ": a finite call cleared the flag";
        EXPECT_EQ(values(clean), (std::vector<double>{0, 2, 4, 6, 8})) << where;
      }
  // The largest finite values are not inf: the flag stays down (f16 max 65504, bf16 ~3.39e38).
  Buf h = mat(PL_F16, 2), found = flag(0);
  h.set(0, 65504);
  h.set(1, -65504);
  plrt::cpu::unscale_check(h.get(), 1.0, found.get());
  EXPECT_EQ(found.as<float>()[0], 0.0f);
  // Empty x: nothing to check, the flag keeps its value.
  Buf empty = mat(PL_F32, 0), up = flag(1);
  plrt::cpu::unscale_check(empty.get(), 0.5, up.get());
  EXPECT_EQ(up.as<float>()[0], 1.0f);
}

TEST(AmpUnscaleCheck, EveryArgumentErrorNamesIt) {
  Buf x = mat(PL_F32, 4), found = flag(0), xi = mat(PL_I32, 4), f64 = mat(PL_F64, 1), f16 = mat(PL_F16, 1);
  Buf two = mat(PL_F32, 2), none = mat(PL_F32, 0), xh = mat(PL_F16, 4), xd = mat(PL_F64, 4);
  auto uc = [](Buf& x_, double inv, PL_Tensor* f) { plrt::cpu::unscale_check(x_.get(), inv, f); };
  expect_failure([&] { uc(xi, 1, found.get()); }, PL_ERR_UNSUPPORTED,
                 {"unscale_check", "x has dtype int32", "float32, float64, float16, bfloat16"});
  expect_failure([&] { uc(x, 1, f64.get()); }, PL_ERR_INVALID_ARGUMENT, {"found_inf is float64", "float32"});
  expect_failure([&] { uc(x, 1, f16.get()); }, PL_ERR_INVALID_ARGUMENT, {"found_inf is float16", "float32"});
  expect_failure([&] { uc(x, 1, two.get()); }, PL_ERR_INVALID_ARGUMENT, {"found_inf has 2 elements", "exactly 1"});
  expect_failure([&] { uc(x, 1, none.get()); }, PL_ERR_INVALID_ARGUMENT, {"found_inf has 0 elements", "exactly 1"});
  expect_failure([&] { uc(x, 1, nullptr); }, PL_ERR_INVALID_ARGUMENT, {"unscale_check: found_inf", "NULL"});
  expect_failure([&] { plrt::cpu::unscale_check(nullptr, 1, found.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"unscale_check: x", "NULL"});
  for (double inv : {double(INFINITY), -double(INFINITY), kNaN})
    expect_failure([&] { uc(x, inv, found.get()); }, PL_ERR_INVALID_ARGUMENT, {"inv_scale", "must be finite"});
  // Finite as a double but not in float: refused for float compute, fine for float64.
  expect_failure([&] { uc(xh, 1e300, found.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"inv_scale 1e+300", "float32", "float16"});
  uc(xd, 1e300, found.get());
  // Devices, struct_size, overlap.
  Buf on_gpu = flag(0);
  on_gpu.t.device = {PL_DEVICE_CUDA, 0};
  expect_failure([&] { uc(x, 1, on_gpu.get()); }, PL_ERR_INVALID_ARGUMENT, {"found_inf is on cuda:0"});
  Buf x_gpu = mat(PL_F32, 4);
  x_gpu.t.device = {PL_DEVICE_CUDA, 1};
  expect_failure([&] { uc(x_gpu, 1, found.get()); }, PL_ERR_INVALID_ARGUMENT, {"x is on cuda:1"});
  Buf old = mat(PL_F32, 4);
  old.t.struct_size = 8;
  expect_failure([&] { uc(old, 1, found.get()); }, PL_ERR_VERSION, {"x", "struct_size 8"});
  PL_Tensor inside = *flag(0).get();
  inside.data = x.as<float>() + 2;  // the flag is one of x's elements
  expect_failure([&] { uc(x, 1, &inside); }, PL_ERR_INVALID_ARGUMENT, {"found_inf overlaps x"});
}

// ---- through the plugin's C table ----

// A minimal host for loading the plugin straight from its file (this test links no runtime).
}  // namespace
struct PL_Error {
  PL_ErrorCode code;
  std::string message;
};
namespace {

PL_Host test_host() {
  PL_Host h{};
  h.struct_size = sizeof h;
  h.abi_major = PL_ABI_MAJOR;
  h.abi_minor = PL_ABI_MINOR;
  h.error_new = [](PL_ErrorCode c, const char* m) { return new PL_Error{c, m ? m : ""}; };
  h.error_destroy = [](PL_Error* e) { delete e; };
  h.error_message = [](const PL_Error* e) { return e->message.c_str(); };
  h.error_code = [](const PL_Error* e) { return e->code; };
  h.log = [](PL_HostContext*, PL_LogLevel, const char*, const char*) {};
  h.log_enabled = [](PL_HostContext*, PL_LogLevel) -> int32_t { return 0; };
  return h;
}

// The build tree's plugin folder: <build>/bin/<test> -> <build>/lib/plrt/plugins (CMakeLists.txt).
std::string cpu_plugin_file() {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return "";
  std::string dir(exe, static_cast<size_t>(len));
  dir = dir.substr(0, dir.find_last_of('/'));  // <build>/bin
  dir = dir.substr(0, dir.find_last_of('/'));  // <build>
  return dir + "/lib/plrt/plugins/libplrt_accelerator_cpu.so";
}

TEST(AmpPluginTable, UnscaleCheckAndHalfGemmAreReachable) {
  const std::string file = cpu_plugin_file();
  void* so = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(so, nullptr) << "cannot load " << file << " (build the plrt_accelerator_cpu target): " << dlerror();
  auto entry = reinterpret_cast<PL_PluginEntryFn>(dlsym(so, PL_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const PL_Host host = test_host();
  const PL_Plugin* plugin = nullptr;
  ASSERT_EQ(entry(&host, &plugin), nullptr);
  ASSERT_NE(plugin, nullptr);
  EXPECT_GE(plugin->abi_minor, 3);
  const auto* api = static_cast<const PL_AcceleratorApi*>(plugin->api);
  ASSERT_GE(api->struct_size, PL_STRUCT_SIZE(PL_AcceleratorApi, unscale_check));
  ASSERT_NE(api->unscale_check, nullptr);
  PL_Accelerator* acc = nullptr;
  ASSERT_EQ(api->create(&host, nullptr, &acc), nullptr);

  ref::SmallGemm g(PL_F16);
  EXPECT_EQ(api->gemm(acc, 0, 0, 0.5, g.a.get(), g.b.get(), 0.0, g.c.get(), nullptr), nullptr);
  EXPECT_EQ(values(g.c), (std::vector<double>{10, 7, 28, 20.5}));

  Buf x = mat(PL_BF16, 3), found = flag(0);
  x.set(0, 4);
  x.set(1, INFINITY);
  x.set(2, -8);
  EXPECT_EQ(api->unscale_check(acc, x.get(), 0.25, found.get(), nullptr), nullptr);
  EXPECT_EQ(found.as<float>()[0], 1.0f);
  EXPECT_EQ(x.at(0), 1.0);
  EXPECT_EQ(x.at(2), -2.0);

  // Errors come back as PL_Error naming the argument.
  PL_Error* e = api->unscale_check(acc, x.get(), INFINITY, found.get(), nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(e->message.find("inv_scale inf"), std::string::npos) << e->message;
  delete e;
  api->destroy(acc);
  dlclose(so);
}

}  // namespace
