// Lightning's gradient clipping (TrainerOptions::gradient_clip_val / gradient_clip_algorithm):
//  - in process, against a hand computation: one SGD(lr=1) step on gradients the module writes
//    itself (norm 13), clipped by norm and by value, and left alone when under the threshold; the
//    parameters the optimizer skips (an unwritten gradient with a stale NaN, a parameter outside
//    the optimizer) are neither read nor changed; under 16-mixed the norm is the unscaled one, and
//    a step the scaler skips is not clipped; a non-finite norm makes the gradients NaN, as torch;
//  - bad values are refused at construction, naming them (and by plrt-mlp, exit 2);
//  - through plrun: ddp at 2 ranks equals one process on the union batch, by norm and by value,
//    and clipping changed the result (compared with a run without it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <plrt/sdk/amp.hpp>

#include "entries_model.hpp"
#include "training_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace plrt_training;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The gradients are not computed but written: a = [3, -4] and b = [12] (norm 13), times the loss
// scale (16-mixed multiplies the loss gradient by it).  c's gradient is never written (its stale
// NaN must not count); d is not in the optimizer (its gradient of 100 must not count either).
class KnownGrads : public pl::LightningModule {
 public:
  explicit KnownGrads(float a0_grad = 3)
      : a_(register_parameter("a", pl::Tensor::from_vector<float>({1, 2}, {2}))),
        b_(register_parameter("b", pl::Tensor::from_vector<float>({-1}, {1}))),
        c_(register_parameter("c", pl::Tensor::from_vector<float>({5}, {1}))),
        d_(register_parameter("d", pl::Tensor::from_vector<float>({7}, {1}))),
        a0_grad_(a0_grad) {}
  pl::Scalar training_step(const pl::Batch&, int64_t) override {
    const float s = static_cast<float>(pl::amp::loss_scale());
    write(a_, {a0_grad_ * s, -4 * s});
    write(b_, {12 * s});
    write(d_, {100});
    c_.grad.data_ptr<float>()[0] = kNaN;  // grad_is_zero stays true: never written this step
    return 0.0;
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 1.0;
    return std::make_unique<pl::SGD>(std::vector<pl::Parameter*>{&a_, &b_, &c_}, o);
  }
  std::vector<float> value(const char* n) { return param(n).value.to_vector<float>(); }
  std::vector<float> grad(const char* n) { return param(n).grad.to_vector<float>(); }

 private:
  static void write(pl::Parameter& p, std::vector<float> g) {
    float* dst = p.grad.data_ptr<float>();
    for (size_t i = 0; i < g.size(); ++i) dst[i] = g[i];
    p.grad_is_zero = false;
  }
  pl::Parameter& param(const char* n) {
    return std::string(n) == "a" ? a_ : std::string(n) == "b" ? b_ : std::string(n) == "c" ? c_ : d_;
  }
  pl::Parameter &a_, &b_, &c_, &d_;
  float a0_grad_;
};

pl::TrainerOptions options(const TempDir& dir, double clip, const std::string& algorithm,
                           const std::string& precision = "32-true") {
  pl::TrainerOptions o;
  o.strategy = "single_device";
  o.accelerator = "cpu";
  o.devices = 1;
  o.max_steps = 1;
  o.max_epochs = 1;
  o.precision = precision;
  o.gradient_clip_val = clip;
  o.gradient_clip_algorithm = algorithm;
  o.default_root_dir = dir.path.string();
  o.enable_progress_bar = false;
  o.enable_checkpointing = false;
  o.read_env = false;
  return o;
}

// One optimizer step of `m` under `o`.
void one_step(KnownGrads& m, const pl::TrainerOptions& o) {
  pl::RuntimeOptions ro;
  ro.log_level = "warn";
  pl::Trainer trainer(o, ro);
  auto data = entries_test::loader(4, 4);
  trainer.fit(m, data);
  ASSERT_EQ(trainer.global_step(), 1);
}

// What the optimizer skips stays as it was: c's value and stale gradient, d's value and gradient.
void expect_untouched_outside(KnownGrads& m) {
  EXPECT_EQ(m.value("c"), std::vector<float>{5});
  EXPECT_TRUE(std::isnan(m.grad("c")[0]));
  EXPECT_EQ(m.value("d"), std::vector<float>{7});
  EXPECT_EQ(m.grad("d"), std::vector<float>{100}) << "a parameter outside the optimizer was clipped";
}

TEST(GradientClipping, ByNormScalesEveryGradientToTheThreshold) {
  for (const char* precision : {"32-true", "16-mixed"}) {
    SCOPED_TRACE(precision);
    TempDir dir;
    KnownGrads m;
    one_step(m, options(dir, 6.5, "norm", precision));
    // By hand: ||(3, -4, 12)|| = 13; coef = 6.5 / (13 + 1e-6); SGD with lr 1: w = w0 - coef * g.
    const double coef = 6.5 / (13 + 1e-6);
    const std::vector<double> g = {3, -4, 12}, w0 = {1, 2, -1};
    const std::vector<float> ga = m.grad("a"), gb = m.grad("b"), a = m.value("a"), b = m.value("b");
    const std::vector<double> got_g = {ga[0], ga[1], gb[0]}, got_w = {a[0], a[1], b[0]};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(got_g[i], coef * g[i], 1e-6) << i;
      EXPECT_NEAR(got_w[i], w0[i] - coef * g[i], 1e-6) << i;
    }
    // The clipped gradient has the threshold's norm.
    EXPECT_NEAR(std::sqrt(got_g[0] * got_g[0] + got_g[1] * got_g[1] + got_g[2] * got_g[2]), 6.5, 1e-5);
    expect_untouched_outside(m);
  }
}

TEST(GradientClipping, ByNormUnderTheThresholdChangesNothing) {
  for (double clip : {13.5, 1e9}) {
    TempDir dir;
    KnownGrads m;
    one_step(m, options(dir, clip, "norm"));
    EXPECT_EQ(m.grad("a"), (std::vector<float>{3, -4}));
    EXPECT_EQ(m.grad("b"), std::vector<float>{12});
    EXPECT_EQ(m.value("a"), (std::vector<float>{1 - 3, 2 + 4}));
    EXPECT_EQ(m.value("b"), std::vector<float>{-1 - 12});
    expect_untouched_outside(m);
  }
}

TEST(GradientClipping, ByValueClampsEveryElement) {
  TempDir dir;
  KnownGrads m;
  one_step(m, options(dir, 3.5, "value"));
  EXPECT_EQ(m.grad("a"), (std::vector<float>{3, -3.5f}));
  EXPECT_EQ(m.grad("b"), std::vector<float>{3.5f});
  EXPECT_EQ(m.value("a"), (std::vector<float>{1 - 3, 2 + 3.5f}));
  EXPECT_EQ(m.value("b"), std::vector<float>{-1 - 3.5f});
  expect_untouched_outside(m);
  TempDir dir2;
  KnownGrads wide;
  one_step(wide, options(dir2, 12, "value"));  // every |g| <= 12: nothing to clamp
  EXPECT_EQ(wide.value("a"), (std::vector<float>{-2, 6}));
  EXPECT_EQ(wide.value("b"), std::vector<float>{-13});
}

TEST(GradientClipping, ANonFiniteNormMakesTheGradientsNanAsTorchAndASkippedStepIsNotClipped) {
  const float inf = std::numeric_limits<float>::infinity();
  {
    // 32-true: total norm inf, coef = 6.5 / inf = 0: inf * 0 = NaN, the others 0 (torch's
    // clip_grad_norm_ with error_if_nonfinite=False).
    TempDir dir;
    KnownGrads m(inf);
    one_step(m, options(dir, 6.5, "norm"));
    EXPECT_TRUE(std::isnan(m.value("a")[0]));
    EXPECT_EQ(m.grad("a")[1], 0.0f);
    EXPECT_EQ(m.value("a")[1], 2.0f);
    EXPECT_EQ(m.value("b"), std::vector<float>{-1});
  }
  {
    // 16-mixed: the scaler finds the inf and skips the step; nothing is clipped or stepped.
    TempDir dir;
    KnownGrads m(inf);
    pl::RuntimeOptions ro;
    ro.log_level = "warn";
    pl::Trainer trainer(options(dir, 6.5, "norm", "16-mixed"), ro);
    auto data = entries_test::loader(4, 4);
    trainer.fit(m, data);
    EXPECT_EQ(trainer.skipped_steps(), 1);
    EXPECT_EQ(m.value("a"), (std::vector<float>{1, 2}));
    EXPECT_EQ(m.value("b"), std::vector<float>{-1});
    EXPECT_EQ(m.grad("a")[1], -4.0f) << "unscaled (-4 * 65536 / 65536) but not clipped";
  }
}

// ---- bad values ----

std::string error_of(const std::function<void()>& f, PL_ErrorCode* code = nullptr) {
  try {
    f();
  } catch (const pl::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

TEST(GradientClipping, BadValuesAreRefusedAtConstructionNamingThem) {
  TempDir dir;
  struct Bad {
    double val;
    std::string algorithm, needle;
  };
  const Bad bad[] = {{-1, "norm", "gradient_clip_val=-1 is not valid"},
                     {std::nan(""), "norm", "gradient_clip_val=nan is not valid"},
                     {INFINITY, "value", "gradient_clip_val=inf is not valid"},
                     {0.5, "l2", "gradient_clip_algorithm='l2' is not valid; valid: norm, value"},
                     {0, "Norm", "gradient_clip_algorithm='Norm'"}};
  for (const Bad& b : bad) {
    PL_ErrorCode code = PL_ERR_OK;
    const std::string msg = error_of([&] { pl::Trainer t(options(dir, b.val, b.algorithm)); }, &code);
    EXPECT_THAT(msg, HasSubstr(b.needle));
    EXPECT_EQ(code, PL_ERR_INVALID_ARGUMENT) << msg;
  }
  EXPECT_THAT(error_of([&] { pl::Trainer t(options(dir, -1, "norm")); }), HasSubstr("finite number >= 0"));
  // 0 (off) with either algorithm is fine.
  EXPECT_EQ(error_of([&] { pl::Trainer t(options(dir, 0, "value")); }), "(no error)");
}

TEST(GradientClipping, EnvironmentOverridesAreParsedAndChecked) {
  TempDir dir;
  auto o = options(dir, 0, "norm");
  o.read_env = true;
  struct Env {
    const char* name;
    Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~Env() { unsetenv(name); }
  };
  {
    Env v("PL_TRAINER_GRADIENT_CLIP_VAL", "0.25"), a("PL_TRAINER_GRADIENT_CLIP_ALGORITHM", "value");
    pl::Trainer t(o);
    EXPECT_EQ(t.options().gradient_clip_val, 0.25);
    EXPECT_EQ(t.options().gradient_clip_algorithm, "value");
  }
  {
    Env v("PL_TRAINER_GRADIENT_CLIP_VAL", "abc");
    EXPECT_THAT(error_of([&] { pl::Trainer t(o); }),
                HasSubstr("PL_TRAINER_GRADIENT_CLIP_VAL='abc' is not valid: it must be a number"));
  }
  {
    Env v("PL_TRAINER_GRADIENT_CLIP_VAL", "-3");
    EXPECT_THAT(error_of([&] { pl::Trainer t(o); }), HasSubstr("gradient_clip_val=-3 is not valid"));
  }
  {
    Env a("PL_TRAINER_GRADIENT_CLIP_ALGORITHM", "l1");
    EXPECT_THAT(error_of([&] { pl::Trainer t(o); }), HasSubstr("gradient_clip_algorithm='l1'"));
  }
}

TEST(GradientClipping, PlrtMlpRefusesBadValuesWithExitCode2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--gradient-clip-val", "-1"}, "gradient_clip_val=-1 is not valid"},
      {{"--gradient-clip-val", "nan"}, "gradient_clip_val=nan is not valid"},
      {{"--gradient-clip-val", "abc"}, "--gradient-clip-val 'abc' is not a number"},
      {{"--gradient-clip-val", "1", "--gradient-clip-algorithm", "l2"}, "'l2' is not valid; valid: norm, value"}};
  TempDir dir;
  for (const auto& [flags, needle] : bad) {
    std::vector<std::string> args = {"--strategy", "single_device", "--devices",      "1", "--max-steps",
                                     "1",          "--root-dir",    dir.path.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = run(mlp_args(args));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  }
}

// ---- through plrun: ddp = one process on the union batch ----

void ddp_clipped_matches_union(const std::string& clip, const std::string& algorithm) {
  TempDir dir;
  const std::vector<std::string> common = {"--max-steps",    "50", "--epochs", "100", "--root-dir", dir.path.string(),
                                           "--no-checkpoint"};
  auto with = [&](std::vector<std::string> a, bool clipped) {
    a.insert(a.end(), common.begin(), common.end());
    if (clipped) a.insert(a.end(), {"--gradient-clip-val", clip, "--gradient-clip-algorithm", algorithm});
    return a;
  };
  auto ddp = run(plrun("ddp", 2, mlp_args(with({"--batch-size", "8", "--save", dir / "ddp.safetensors"}, true))));
  EXPECT_RAN(ddp);
  auto single = run(mlp_args(with(
      {"--strategy", "single_device", "--devices", "1", "--batch-size", "16", "--save", dir / "single.safetensors"},
      true)));
  EXPECT_RAN(single);
  EXPECT_LE(relative_difference(dir / "ddp.safetensors", dir / "single.safetensors"), 1e-5)
      << "ddp at 2 ranks with clipping (" << algorithm << " " << clip << ") drifted from one process";
  // Clipping changed the training: the same run without it ends elsewhere.
  auto plain = run(mlp_args(
      with({"--strategy", "single_device", "--devices", "1", "--batch-size", "16", "--save", dir / "plain.safetensors"},
           false)));
  EXPECT_RAN(plain);
  EXPECT_GT(relative_difference(dir / "single.safetensors", dir / "plain.safetensors"), 0.1);
}

TEST(GradientClipping, DdpTwoRanksByNormEqualsUnionBatch) { ddp_clipped_matches_union("0.05", "norm"); }
TEST(GradientClipping, DdpTwoRanksByValueEqualsUnionBatch) { ddp_clipped_matches_union("0.01", "value"); }

}  // namespace
