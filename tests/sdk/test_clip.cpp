// Gradient clipping's accelerator calls in the SDK (ABI 1.5): pl::Accelerator::sum_squares and
// clamp through the cpu plugin's entries, and the host fallback that runs for a plugin built for
// ABI 1.4 ("cpu14": the cpu plugin with its table cut at device_status), which must give the same
// values and refuse the same arguments; and GradScaler::unscale over ranges (only the ranges are
// unscaled and checked).
#include <gmock/gmock.h>

#include <cmath>
#include <limits>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/amp.hpp>
#include <plrt/sdk/tensor.hpp>
#include <random>

#include "sdk_test_support.hpp"

namespace {

using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;
using ::testing::HasSubstr;

pl::Accelerator& cpu() {
  static pl::Accelerator acc(runtime(), "cpu");
  return acc;
}

pl::Runtime& runtime14() {
  static pl::Runtime rt([] {
    pl::RuntimeOptions o;
    o.plugin_dirs = {PLRT_TEST_CPU14_DIR};
    o.use_env_dirs = false;
    o.use_default_dirs = false;
    o.log_level = "warn";
    return o;
  }());
  return rt;
}

pl::Accelerator& cpu14() {
  static pl::Accelerator acc(runtime14(), "cpu14");
  return acc;
}

const PL_DType kFloats[] = {PL_F64, PL_F32, PL_F16, PL_BF16};

// n values in [-3, 3] (plus a few special ones) as `dtype`, made through the accelerator's cast.
pl::Tensor values_as(pl::Accelerator& acc, PL_DType dtype, int64_t n, uint32_t seed, bool specials) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  if (specials && n > 6) {
    v[0] = std::numeric_limits<double>::quiet_NaN();
    v[1] = -0.0;
    v[2] = INFINITY;
    v[3] = -INFINITY;
    v[4] = 0.1;
    v[5] = -0.1;
  }
  pl::Tensor src = pl::Tensor::from_vector(v, {n}).to(acc, kCpu);
  pl::Tensor out = pl::Tensor::empty(acc, kCpu, {n}, dtype);
  PL_Tensor o = out.view(), s = src.view();
  acc.cast(o, s);
  return out;
}

std::vector<uint8_t> bytes_of(const pl::Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

TEST(ClipAccelerator, ThePluginHasTheEntriesAndTheAbi14PluginDoesNot) {
  EXPECT_TRUE(cpu().has_sum_squares());
  EXPECT_TRUE(cpu().has_clamp());
  EXPECT_FALSE(cpu14().has_sum_squares());
  EXPECT_FALSE(cpu14().has_clamp());
  EXPECT_EQ(runtime14().find(PL_PLUGIN_ACCELERATOR, "cpu14").plugin->abi_minor, 4);
}

TEST(ClipAccelerator, TheHostFallbackSumsAsThePluginDoes) {
  for (PL_DType d : kFloats)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{9}, int64_t{4099}}) {
      SCOPED_TRACE(std::string(pl_dtype_name(d)) + " n=" + std::to_string(n));
      pl::Tensor x = values_as(cpu(), d, n, 3, false), x14 = values_as(cpu14(), d, n, 3, false);
      ASSERT_EQ(bytes_of(x), bytes_of(x14));
      pl::Tensor s = pl::Tensor::from_vector<double>({0.5}, {1}).to(cpu(), kCpu);
      pl::Tensor s14 = pl::Tensor::from_vector<double>({0.5}, {1}).to(cpu14(), kCpu);
      PL_Tensor xv = x.view(), sv = s.view(), xv14 = x14.view(), sv14 = s14.view();
      cpu().sum_squares(xv, sv);
      cpu14().sum_squares(xv14, sv14);
      cpu14().sum_squares(xv14, sv14);  // and it adds, as the entry does
      const double want = s.to_vector<double>()[0];
      EXPECT_NEAR(s14.to_vector<double>()[0], 2 * want - 0.5, 1e-13 * want);
    }
  // Integers: every sum exact, so the same bits whatever the order.
  pl::Tensor x = pl::Tensor::from_vector<float>({3, -4, 12, 0.5f}, {4}).to(cpu14(), kCpu);
  pl::Tensor s = pl::Tensor::zeros(cpu14(), kCpu, {1}, PL_F64);
  PL_Tensor xv = x.view(), sv = s.view();
  cpu14().sum_squares(xv, sv);
  EXPECT_EQ(s.to_vector<double>()[0], 169.25);
}

TEST(ClipAccelerator, TheHostFallbackClampsAsThePluginDoesBitForBit) {
  for (PL_DType d : kFloats)
    for (auto [lo, hi] :
         {std::pair{-0.1, 0.1}, std::pair{-1.0, 2.5}, std::pair{-double(INFINITY), 0.0}, std::pair{-1e6, 1e6}}) {
      SCOPED_TRACE(std::string(pl_dtype_name(d)) + " [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      pl::Tensor x = values_as(cpu(), d, 301, 5, true), x14 = values_as(cpu14(), d, 301, 5, true);
      const std::vector<uint8_t> before = bytes_of(x);
      PL_Tensor xv = x.view(), xv14 = x14.view();
      cpu().clamp(xv, lo, hi);
      cpu14().clamp(xv14, lo, hi);
      EXPECT_EQ(bytes_of(x14), bytes_of(x));
      if (lo == -1.0) {
        EXPECT_NE(bytes_of(x), before) << "the bounds must have clamped something";
      }
    }
}

TEST(ClipAccelerator, TheHostFallbackRefusesWhatThePluginRefuses) {
  for (pl::Accelerator* acc : {&cpu(), &cpu14()}) {
    SCOPED_TRACE(acc->name());
    pl::Tensor x = pl::Tensor::zeros(*acc, kCpu, {4}, PL_F32);
    pl::Tensor xi = pl::Tensor::zeros(*acc, kCpu, {4}, PL_I64);
    pl::Tensor s = pl::Tensor::zeros(*acc, kCpu, {1}, PL_F64);
    pl::Tensor s32 = pl::Tensor::zeros(*acc, kCpu, {1}, PL_F32);
    pl::Tensor s2 = pl::Tensor::zeros(*acc, kCpu, {2}, PL_F64);
    PL_Tensor xv = x.view(), xiv = xi.view(), sv = s.view(), s32v = s32.view(), s2v = s2.view();
    auto code_of = [](const std::function<void()>& f) -> int {
      try {
        f();
      } catch (const pl::Error& e) {
        return e.code();
      }
      return PL_ERR_OK;
    };
    EXPECT_THAT(error_of([&] { acc->clamp(xv, 1, -1); }), HasSubstr("clamp: lo 1 is greater than hi -1"));
    EXPECT_EQ(code_of([&] { acc->clamp(xv, 1, -1); }), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(error_of([&] { acc->clamp(xv, NAN, 1); }), HasSubstr("lo nan and hi 1 must not be NaN"));
    EXPECT_THAT(error_of([&] { acc->clamp(xv, -1, NAN); }), HasSubstr("hi nan must not be NaN"));
    EXPECT_EQ(code_of([&] { acc->clamp(xv, -1, NAN); }), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(error_of([&] { acc->clamp(xiv, -1, 1); }), HasSubstr("x has dtype int64"));
    EXPECT_EQ(code_of([&] { acc->clamp(xiv, -1, 1); }), PL_ERR_UNSUPPORTED);
    EXPECT_THAT(error_of([&] { acc->sum_squares(xv, s32v); }), HasSubstr("sum_squares: out is float32"));
    EXPECT_EQ(code_of([&] { acc->sum_squares(xv, s32v); }), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(error_of([&] { acc->sum_squares(xv, s2v); }), HasSubstr("out has 2 elements"));
    PL_Tensor elsewhere = sv;
    elsewhere.device = {PL_DEVICE_CUDA, 0};
    EXPECT_THAT(error_of([&] { acc->sum_squares(xv, elsewhere); }), HasSubstr("cuda:0"));
    EXPECT_EQ(code_of([&] { acc->sum_squares(xv, elsewhere); }), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(error_of([&] { acc->sum_squares(xiv, sv); }), HasSubstr("x has dtype int64"));
    PL_Tensor inside = sv;
    inside.data = x.data_ptr<float>() + 2;  // 8 bytes inside x
    EXPECT_THAT(error_of([&] { acc->sum_squares(xv, inside); }), HasSubstr("out overlaps x"));
  }
}

// ---- GradScaler::unscale over ranges ----

struct TwoParams : pl::Module {
  pl::Parameter& a;
  pl::Parameter& b;
  TwoParams()
      : a(register_parameter("a", pl::Tensor::zeros({6}, PL_F32))),
        b(register_parameter("b", pl::Tensor::zeros({2}, PL_F32))) {}
};

TEST(ClipScaler, UnscaleTouchesAndChecksOnlyTheRanges) {
  TwoParams m;
  m.to(cpu(), kCpu);
  pl::amp::GradScalerOptions o;
  o.init_scale = 4.0;
  pl::amp::GradScaler s(o);
  float* ga = m.a.grad.data_ptr<float>();
  float* gb = m.b.grad.data_ptr<float>();
  for (int i = 0; i < 6; ++i) ga[i] = 8;
  gb[0] = 8, gb[1] = 8;
  ga[5] = std::numeric_limits<float>::infinity();  // outside the ranges: unspecified, never read
  m.a.grad_is_zero = m.b.grad_is_zero = false;
  const std::vector<pl::Parameter*> params = {&m.a, &m.b};
  EXPECT_FALSE(s.unscale(params, {{0, 1, 3}, {1, 0, 2}}));
  EXPECT_EQ(std::vector<float>(ga, ga + 6), (std::vector<float>{8, 2, 2, 8, 8, INFINITY}));
  EXPECT_EQ(std::vector<float>(gb, gb + 2), (std::vector<float>{2, 2}));
  EXPECT_TRUE(s.unscale(params, {{0, 4, 6}}));  // now the inf is inside
  EXPECT_THAT(error_of([&] { s.unscale(params, {{2, 0, 1}}); }), HasSubstr("parameter 2 of 2"));
  EXPECT_THAT(error_of([&] { s.unscale(params, {{1, 0, 3}}); }), HasSubstr("[0, 3) is outside parameter 1"));
}

}  // namespace
