// Mixed precision in the SDK: precision names, thread-local autocast, the layers under autocast,
// the dynamic loss scaler alone and inside Trainer::fit (an overflowing step is skipped and the
// scale lowered).
#include <gmock/gmock.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <plrt/sdk/amp.hpp>
#include <plrt/sdk/nn.hpp>
#include <plrt/sdk/trainer.hpp>
#include <thread>

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

TEST(Amp, PrecisionNamesAndOldSpellings) {
  EXPECT_EQ(pl::amp::Precision::parse("32").name, "32-true");
  EXPECT_EQ(pl::amp::Precision::parse("32-true").compute_dtype, PL_DTYPE_INVALID);
  auto h = pl::amp::Precision::parse("16");
  EXPECT_EQ(h.name, "16-mixed");
  EXPECT_EQ(h.compute_dtype, PL_F16);
  EXPECT_TRUE(h.scaled);
  auto b = pl::amp::Precision::parse("bf16");
  EXPECT_EQ(b.name, "bf16-mixed");
  EXPECT_EQ(b.compute_dtype, PL_BF16);
  EXPECT_FALSE(b.scaled);
  std::string e = error_of([] { pl::amp::Precision::parse("64-true"); });
  EXPECT_THAT(e, HasSubstr("64-true"));
  EXPECT_THAT(e, HasSubstr("bf16-mixed"));
}

TEST(Amp, AutocastIsPerThreadAndRestored) {
  EXPECT_EQ(pl::amp::compute_dtype(), PL_DTYPE_INVALID);
  {
    pl::amp::Autocast a(PL_BF16, 8.0);
    EXPECT_EQ(pl::amp::compute_dtype(), PL_BF16);
    EXPECT_EQ(pl::amp::loss_scale(), 8.0);
    PL_DType other = PL_F64;
    std::thread([&] { other = pl::amp::compute_dtype(); }).join();
    EXPECT_EQ(other, PL_DTYPE_INVALID);
    {
      pl::amp::Autocast inner(PL_F16);
      EXPECT_EQ(pl::amp::compute_dtype(), PL_F16);
    }
    EXPECT_EQ(pl::amp::compute_dtype(), PL_BF16);
  }
  EXPECT_EQ(pl::amp::compute_dtype(), PL_DTYPE_INVALID);
  EXPECT_EQ(pl::amp::loss_scale(), 1.0);
  EXPECT_THAT(error_of([] { pl::amp::Autocast a(PL_F32); }), HasSubstr("float32"));
  EXPECT_THAT(error_of([] { pl::amp::Autocast a(PL_F16, 0.0); }), HasSubstr("loss scale"));
}

struct OneParam : pl::Module {
  pl::Parameter& p;
  explicit OneParam(std::vector<float> v)
      : p(register_parameter("w", pl::Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}))) {}
};

TEST(Amp, ScalerUnscalesAndDetectsInfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {inf, -inf, std::nanf("")}) {
    OneParam m({1, 2, 3});
    m.to(cpu(), kCpu);
    pl::amp::GradScalerOptions o;
    o.init_scale = 4.0;
    pl::amp::GradScaler s(o);
    float* g = m.p.grad.data_ptr<float>();
    g[0] = 8, g[1] = bad, g[2] = -2;
    m.p.grad_is_zero = false;
    EXPECT_TRUE(s.unscale({&m.p})) << bad;
    EXPECT_EQ(g[0], 2.0f);
    EXPECT_EQ(g[2], -0.5f);
    s.update(true);
    EXPECT_EQ(s.scale(), 2.0) << "the scale backs off by half";
    EXPECT_EQ(s.skipped_steps(), 1);
  }
}

TEST(Amp, ScalerSkipsUnwrittenGradientsAndGrows) {
  OneParam m({1, 2});
  m.to(cpu(), kCpu);
  pl::amp::GradScalerOptions o;
  o.init_scale = 2.0;
  o.growth_interval = 3;
  pl::amp::GradScaler s(o);
  float* g = m.p.grad.data_ptr<float>();
  g[0] = std::nanf(""), g[1] = 1;
  m.p.grad_is_zero = true;  // never written this step: its stale NaN must not count
  EXPECT_FALSE(s.unscale({&m.p}));
  m.p.grad_is_zero = false;
  g[0] = 4, g[1] = 6;
  EXPECT_FALSE(s.unscale({&m.p}));
  EXPECT_EQ(g[0], 2.0f);
  EXPECT_EQ(g[1], 3.0f);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 2.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 4.0) << "grows after growth_interval clean steps";
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0);
}

TEST(Amp, ScalerOptionsAreChecked) {
  pl::amp::GradScalerOptions o;
  o.growth_factor = 1.0;
  EXPECT_THAT(error_of([&] { pl::amp::GradScaler s(o); }), HasSubstr("growth_factor"));
  o = {};
  o.backoff_factor = 1.5;
  EXPECT_THAT(error_of([&] { pl::amp::GradScaler s(o); }), HasSubstr("backoff_factor"));
  o = {};
  o.init_scale = -1;
  EXPECT_THAT(error_of([&] { pl::amp::GradScaler s(o); }), HasSubstr("init_scale"));
}

TEST(Amp, LinearUnderAutocastComputesInLowPrecisionWithFloat32Gradients) {
  pl::Generator gen(3);
  pl::nn::Linear a(7, 5, true, &gen), b(7, 5, true, &gen);
  b.load_state_dict({{"weight", a.weight().value}, {"bias", a.bias()->value}});
  a.to(cpu(), kCpu);
  b.to(cpu(), kCpu);
  std::vector<float> xs(4 * 7);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i));
  pl::Tensor x = pl::Tensor::from_vector(xs, {4, 7});
  pl::Tensor y32 = a.forward(x).clone();
  std::vector<float> dys(4 * 5, 0.25f);
  a.backward(pl::Tensor::from_vector(dys, {4, 5}));
  for (PL_DType low : {PL_BF16, PL_F16}) {
    pl::amp::Autocast ac(low);
    b.zero_grad();
    pl::Tensor y = b.forward(x);
    ASSERT_EQ(y.dtype(), low);
    pl::Tensor y_wide = pl::Tensor::empty(cpu(), kCpu, y.shape(), PL_F32);
    PL_Tensor wv = y_wide.view();
    cpu().cast(wv, y.view());
    auto got = y_wide.to_vector<float>(), want = y32.to_vector<float>();
    const double tol = low == PL_BF16 ? 3e-2 : 4e-3;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << i;
    pl::Tensor dy = pl::Tensor::empty(cpu(), kCpu, {4, 5}, low);
    PL_Tensor dyv = dy.view();
    cpu().fill(dyv, 0.25);
    pl::Tensor dx = b.backward(dy);
    EXPECT_EQ(dx.dtype(), low);
    EXPECT_EQ(b.weight().grad.dtype(), PL_F32);
    auto gw = b.weight().grad.to_vector<float>(), gw32 = a.weight().grad.to_vector<float>();
    for (size_t i = 0; i < gw.size(); ++i) EXPECT_NEAR(gw[i], gw32[i], tol * (1 + std::fabs(gw32[i]))) << i;
    auto gb = b.bias()->grad.to_vector<float>();
    for (float v : gb) EXPECT_FLOAT_EQ(v, 1.0f);  // 4 rows x 0.25, exact in every dtype
  }
}

TEST(Amp, CrossEntropyGradientCarriesTheLossScale) {
  pl::Tensor logits = pl::Tensor::empty(cpu(), kCpu, {2, 3}, PL_F32);
  PL_Tensor lv = logits.view();
  cpu().fill(lv, 0.5);
  pl::Tensor labels = pl::Tensor::from_vector<int64_t>({0, 2}, {2});
  auto plain = pl::nn::cross_entropy(logits, labels);
  pl::amp::Autocast ac(PL_F16, 1024.0);
  auto scaled = pl::nn::cross_entropy(logits, labels);
  EXPECT_DOUBLE_EQ(scaled.loss.value(), plain.loss.value()) << "the loss value is never scaled";
  auto g = scaled.grad.to_vector<float>(), g0 = plain.grad.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], 1024.0f * g0[i]);
}

// A tiny classifier for Trainer::fit under 16-mixed.
struct Tiny : pl::LightningModule {
  pl::nn::Linear fc;
  explicit Tiny(pl::Generator* g) : fc(4, 3, true, g) { register_module("fc", fc); }
  pl::Scalar training_step(const pl::Batch& b, int64_t) override {
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1));
    fc.backward(ce.grad, false);
    return ce.loss;
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 0.1;
    return std::make_unique<pl::SGD>(parameters(), o);
  }
};

std::vector<float> fit_tiny(double init_scale, int64_t steps, double* scale_out = nullptr,
                            int64_t* skipped_out = nullptr) {
  auto dir = std::filesystem::temp_directory_path() / ("plrt-amp-" + std::to_string(::getpid()));
  pl::TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = 1;
  o.strategy = "single_device";
  o.precision = "16-mixed";
  o.grad_scaler.init_scale = init_scale;
  o.max_steps = steps;
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.read_env = false;
  o.default_root_dir = dir.string();
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  ro.use_env_dirs = false;
  ro.log_level = "warn";
  pl::Trainer trainer(o, ro);
  pl::Generator gen(11);
  Tiny m(&gen);
  std::vector<float> xs(16 * 4);
  std::vector<int64_t> ys(16);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(static_cast<float>(i));
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
  auto ds = std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{pl::Tensor::from_vector(xs, {16, 4}), pl::Tensor::from_vector(ys, {16})});
  pl::DataLoaderOptions lo;
  lo.batch_size = 8;
  pl::DataLoader loader(ds, lo);
  trainer.fit(m, loader);
  if (scale_out) *scale_out = trainer.loss_scale();
  if (skipped_out) *skipped_out = trainer.skipped_steps();
  std::filesystem::remove_all(dir);
  return m.fc.weight().value.to_vector<float>();
}

TEST(Amp, TrainerSkipsAnOverflowingStepAndLowersTheScale) {
  // 0 steps: the initial weights.  A scale of 2^40 overflows float16 (max 65504) on the first
  // step: the step is skipped (weights unchanged) and the scale halves.
  const auto init = fit_tiny(1024.0, 0);
  double scale = 0;
  int64_t skipped = 0;
  const auto after_overflow = fit_tiny(std::ldexp(1.0, 40), 1, &scale, &skipped);
  EXPECT_EQ(after_overflow, init) << "an inf step must not change the weights";
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(scale, std::ldexp(1.0, 39));
  // A sane scale steps at once.
  const auto stepped = fit_tiny(1024.0, 1, &scale, &skipped);
  EXPECT_NE(stepped, init);
  EXPECT_EQ(skipped, 0);
  EXPECT_EQ(scale, 1024.0);
  // Enough steps from an absurd scale: it backs off until steps go through.
  const auto recovered = fit_tiny(std::ldexp(1.0, 40), 40, &scale, &skipped);
  EXPECT_GT(skipped, 0);
  EXPECT_LT(skipped, 40);
  EXPECT_NE(recovered, init);
}

}  // namespace
