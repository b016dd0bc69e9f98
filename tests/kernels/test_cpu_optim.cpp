// sgd_step and adam_step against (1) torch.optim's formulas in double precision over several steps,
// within a per-dtype tolerance, and (2) the documented compute-type arithmetic, bit for bit; plus
// their error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "reference.hpp"

using ref::Buf;
using ref::expect_failure;

namespace {

const int64_t kSizes[] = {0, 1, 7, 1000, 4099};
const PL_DType kFloatDtypes[] = {PL_F32, PL_F64, PL_F16, PL_BF16};
constexpr int kSteps = 5;

// |got - want| <= tol * max(1, |want|): the stored rounding accumulates over the steps.
double tolerance(PL_DType d) {
  switch (d) {
    case PL_F64:
      return 1e-12;
    case PL_F32:
      return 2e-5;
    case PL_F16:
      return 1e-2;
    default:
      return 4e-2;  // bfloat16: 8 significant bits
  }
}

void fill_random(Buf& b, std::mt19937_64& rng, double lo, double hi, bool away_from_zero = false) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < b.n(); ++i) {
    double v = u(rng);
    if (away_from_zero) v = (rng() & 1 ? 1 : -1) * (0.1 + std::fabs(v));
    b.set(i, v);
  }
}

void expect_close(Buf& b, const std::vector<double>& want, const std::string& what) {
  const double tol = tolerance(b.t.dtype);
  int failures = 0;
  for (int64_t i = 0; i < b.n() && failures < 5; ++i) {
    const double err = std::fabs(b.at(i) - want[i]);
    if (!(err <= tol * std::max(1.0, std::fabs(want[i])))) {
      ADD_FAILURE() << what << " [" << i << "]: got " << b.at(i) << ", want " << want[i];
      ++failures;
    }
  }
}

void expect_exact(Buf& b, const std::vector<double>& want, const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < b.n() && failures < 5; ++i)
    if (!ref::same_value(b.at(i), want[i])) {
      ADD_FAILURE() << what << " [" << i << "]: got " << b.at(i) << ", want exactly " << want[i];
      ++failures;
    }
}

std::vector<double> values(Buf& b) {
  std::vector<double> v(static_cast<size_t>(b.n()));
  for (int64_t i = 0; i < b.n(); ++i) v[i] = b.at(i);
  return v;
}

// Arithmetic in the compute type of `d` (float, or double for f64): each result rounded to it.
struct Calc {
  PL_DType d;
  double c(double v) const { return d == PL_F64 ? v : static_cast<double>(static_cast<float>(v)); }
  double add(double a, double b) const { return c(a + b); }  // a, b already in the compute type
  double sub(double a, double b) const { return c(a - b); }
  double mul(double a, double b) const { return c(a * b); }
  double div(double a, double b) const { return c(a / b); }
  double sqrt(double a) const {
    return d == PL_F64 ? std::sqrt(a) : static_cast<double>(std::sqrt(static_cast<float>(a)));
  }
};

PL_SgdParams sgd(double lr, double momentum, double dampening, double wd, bool nesterov) {
  PL_SgdParams p{};
  p.struct_size = sizeof p;
  p.lr = lr;
  p.momentum = momentum;
  p.dampening = dampening;
  p.weight_decay = wd;
  p.nesterov = nesterov;
  return p;
}

PL_AdamParams adam(double lr, double b1, double b2, double eps, double wd, bool decoupled) {
  PL_AdamParams p{};
  p.struct_size = sizeof p;
  p.lr = lr;
  p.beta1 = b1;
  p.beta2 = b2;
  p.eps = eps;
  p.weight_decay = wd;
  p.decoupled_weight_decay = decoupled;
  return p;
}

std::string label(PL_DType d, int64_t n) { return std::string(pl_dtype_name(d)) + "[" + std::to_string(n) + "]"; }

}  // namespace

// ---- SGD ----

TEST(CpuSgd, MatchesTorchFormulasOverSteps) {
  const PL_SgdParams configs[] = {
      sgd(0.1, 0.0, 0.0, 0.0, false), sgd(0.1, 0.0, 0.0, 0.05, false), sgd(0.1, 0.9, 0.0, 0.0, false),
      sgd(0.1, 0.9, 0.3, 0.0, false), sgd(0.1, 0.9, 0.0, 0.0, true),   sgd(0.05, 0.8, 0.0, 0.01, true),
      sgd(0.2, 0.5, 0.5, 0.1, false),
  };
  for (const PL_SgdParams& cfg0 : configs)
    for (PL_DType d : kFloatDtypes)
      for (int64_t n : kSizes) {
        std::mt19937_64 rng(42);
        Buf p(d, n), g(d, n), buf(d, n);
        fill_random(p, rng, -1, 1);
        std::vector<double> rp = values(p), rbuf(static_cast<size_t>(n), 0.0);  // double reference
        std::vector<double> xp = rp, xbuf = rbuf;                               // compute-type reference
        const Calc k{d};
        for (int step = 0; step < kSteps; ++step) {
          fill_random(g, rng, -1, 1);
          PL_SgdParams cfg = cfg0;
          cfg.first_step = step == 0;
          plrt::cpu::sgd_step(p.get(), g.get(), buf.get(), &cfg);
          for (int64_t i = 0; i < n; ++i) {
            const double gi = g.at(i);
            // torch.optim.SGD, in double.
            double dd = gi + cfg.weight_decay * rp[i];
            if (cfg.momentum != 0) {
              rbuf[i] = step == 0 ? dd : cfg.momentum * rbuf[i] + (1 - cfg.dampening) * dd;
              dd = cfg.nesterov ? dd + cfg.momentum * rbuf[i] : rbuf[i];
            }
            rp[i] -= cfg.lr * dd;
            // The documented compute-type arithmetic, each store rounded to the dtype.
            double e = gi;
            if (cfg.weight_decay != 0) e = k.add(e, k.mul(k.c(cfg.weight_decay), xp[i]));
            if (cfg.momentum != 0) {
              const double b =
                  step == 0 ? e : k.add(k.mul(k.c(cfg.momentum), xbuf[i]), k.mul(k.c(1 - cfg.dampening), e));
              xbuf[i] = ref::round_store(b, d);
              e = cfg.nesterov ? k.add(e, k.mul(k.c(cfg.momentum), b)) : b;
            }
            xp[i] = ref::round_store(k.sub(xp[i], k.mul(k.c(cfg.lr), e)), d);
          }
        }
        const std::string what = "sgd " + label(d, n) + " momentum " + std::to_string(cfg0.momentum) + " dampening " +
                                 std::to_string(cfg0.dampening) + " wd " + std::to_string(cfg0.weight_decay) +
                                 (cfg0.nesterov ? " nesterov" : "");
        expect_close(p, rp, what + " param vs double");
        expect_exact(p, xp, what + " param vs compute-type reference");
        if (cfg0.momentum != 0) {
          expect_close(buf, rbuf, what + " momentum_buf vs double");
          expect_exact(buf, xbuf, what + " momentum_buf vs compute-type reference");
        }
      }
}

TEST(CpuSgd, NoMomentumIgnoresNullBuffer) {
  Buf p(PL_F32, 3), g(PL_F32, 3);
  for (int i = 0; i < 3; ++i) {
    p.set(i, 1.0);
    g.set(i, i);
  }
  PL_SgdParams cfg = sgd(0.5, 0.0, 0.0, 0.0, false);
  plrt::cpu::sgd_step(p.get(), g.get(), nullptr, &cfg);
  EXPECT_EQ(p.at(0), 1.0);
  EXPECT_EQ(p.at(1), 0.5);
  EXPECT_EQ(p.at(2), 0.0);
}

TEST(CpuSgdErrors, All) {
  Buf p(PL_F32, 4), g(PL_F32, 4), b(PL_F32, 4), g5(PL_F32, 5), gd(PL_F64, 4), pi(PL_I32, 4), gi(PL_I32, 4);
  PL_SgdParams cfg = sgd(0.1, 0.0, 0.0, 0.0, true);
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"nesterov", "momentum 0", "dampening 0"});
  cfg = sgd(0.1, 0.9, 0.1, 0.0, true);
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"nesterov", "dampening 0.1"});
  cfg = sgd(-0.1, 0.0, 0.0, 0.0, false);
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"lr -0.1", ">= 0"});
  cfg = sgd(0.1, -0.5, 0.0, 0.0, false);
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"momentum -0.5"});
  cfg = sgd(0.1, 0.0, 0.0, std::nan(""), false);
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"weight_decay nan"});
  cfg = sgd(0.1, 0.9, 0.0, 0.0, false);
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), nullptr, &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"momentum_buf is NULL", "0.9"});
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g5.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"4", "5", "grad"});
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), gd.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"float32", "float64"});
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), g5.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"momentum_buf", "5"});
  expect_failure([&] { plrt::cpu::sgd_step(pi.get(), gi.get(), nullptr, &cfg); }, PL_ERR_UNSUPPORTED,
                 {"int32", "float32"});
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), nullptr); }, PL_ERR_INVALID_ARGUMENT,
                 {"params is NULL"});
  PL_SgdParams small = cfg;
  small.struct_size = 16;
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), g.get(), b.get(), &small); }, PL_ERR_VERSION, {"struct_size 16"});
  Buf nod(PL_F32, 4);
  nod.t.data = nullptr;
  expect_failure([&] { plrt::cpu::sgd_step(p.get(), &nod.t, b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"grad", "NULL"});
  nod.t.data = nod.raw();
  nod.t.device = PL_Device{PL_DEVICE_CUDA, 0};
  expect_failure([&] { plrt::cpu::sgd_step(&nod.t, g.get(), b.get(), &cfg); }, PL_ERR_INVALID_ARGUMENT,
                 {"param", "cuda:0"});
}

// ---- Adam / AdamW ----

TEST(CpuAdam, MatchesTorchFormulasOverSteps) {
  struct Cfg {
    double lr, b1, b2, wd;
    bool decoupled;
  };
  const Cfg configs[] = {{0.05, 0.9, 0.999, 0.0, false},
                         {0.05, 0.9, 0.999, 0.1, false},
                         {0.05, 0.9, 0.999, 0.1, true},
                         {0.02, 0.0, 0.99, 0.0, true},
                         {0.1, 0.5, 0.0, 0.01, false}};
  for (const Cfg& c : configs)
    for (PL_DType d : kFloatDtypes)
      for (int64_t n : kSizes) {
        // f16 cannot hold v for small gradients: a larger eps keeps its updates meaningful.
        const double eps = d == PL_F16 ? 1e-3 : 1e-8;
        std::mt19937_64 rng(7);
        Buf p(d, n), g(d, n), m(d, n), v(d, n);
        fill_random(p, rng, -1, 1);
        std::vector<double> rp = values(p), rm(static_cast<size_t>(n), 0.0), rv = rm;
        std::vector<double> xp = rp, xm = rm, xv = rm;
        const Calc k{d};
        for (int64_t step = 1; step <= kSteps; ++step) {
          fill_random(g, rng, 0, 1, /*away_from_zero=*/true);
          PL_AdamParams cfg = adam(c.lr, c.b1, c.b2, eps, c.wd, c.decoupled);
          cfg.step = step;
          plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), &cfg);
          const double bc1 = 1 - std::pow(c.b1, static_cast<double>(step));
          const double bc2 = 1 - std::pow(c.b2, static_cast<double>(step));
          for (int64_t i = 0; i < n; ++i) {
            // torch.optim.Adam / AdamW, in double.
            double gi = g.at(i);
            if (c.decoupled)
              rp[i] *= 1 - c.lr * c.wd;
            else if (c.wd != 0)
              gi += c.wd * rp[i];
            rm[i] = c.b1 * rm[i] + (1 - c.b1) * gi;
            rv[i] = c.b2 * rv[i] + (1 - c.b2) * gi * gi;
            rp[i] -= (c.lr / bc1) * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + eps);
            // The documented compute-type arithmetic.
            double pi = xp[i], ge = g.at(i);
            if (c.decoupled) {
              if (c.wd != 0) pi = k.mul(pi, k.c(1 - c.lr * c.wd));
            } else if (c.wd != 0) {
              ge = k.add(ge, k.mul(k.c(c.wd), pi));
            }
            const double mi = k.add(k.mul(k.c(c.b1), xm[i]), k.mul(k.c(1 - c.b1), ge));
            const double vi = k.add(k.mul(k.c(c.b2), xv[i]), k.mul(k.mul(k.c(1 - c.b2), ge), ge));
            xm[i] = ref::round_store(mi, d);
            xv[i] = ref::round_store(vi, d);
            const double denom = k.add(k.div(k.sqrt(vi), k.c(std::sqrt(bc2))), k.c(eps));
            xp[i] = ref::round_store(k.sub(pi, k.mul(k.c(c.lr / bc1), k.div(mi, denom))), d);
          }
        }
        const std::string what = std::string(c.decoupled ? "adamw " : "adam ") + label(d, n) + " lr " +
                                 std::to_string(c.lr) + " betas " + std::to_string(c.b1) + "," + std::to_string(c.b2) +
                                 " wd " + std::to_string(c.wd);
        expect_close(p, rp, what + " param vs double");
        expect_close(m, rm, what + " exp_avg vs double");
        expect_close(v, rv, what + " exp_avg_sq vs double");
        expect_exact(p, xp, what + " param vs compute-type reference");
        expect_exact(m, xm, what + " exp_avg vs compute-type reference");
        expect_exact(v, xv, what + " exp_avg_sq vs compute-type reference");
      }
}

TEST(CpuAdam, FirstStepMovesEachParamByAboutLr) {
  // Bias correction makes Adam's first step lr * sign(g) (for |g| >> eps): a value check that
  // fails if either correction is missing.
  Buf p(PL_F32, 4), g(PL_F32, 4), m(PL_F32, 4), v(PL_F32, 4);
  const double grads[] = {0.5, -2.0, 1e-3, -7.0};
  for (int i = 0; i < 4; ++i) {
    p.set(i, 1.0);
    g.set(i, grads[i]);
  }
  PL_AdamParams cfg = adam(0.01, 0.9, 0.999, 1e-8, 0.0, false);
  cfg.step = 1;
  plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), &cfg);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p.at(i), 1.0 - 0.01 * (grads[i] > 0 ? 1 : -1), 1e-6) << i;
}

// ABI 1.6, QAdam after its warmup: exp_avg_sq frozen; with grad_is_exp_avg the gradient is the new
// exp_avg itself (no weight decay, no beta1 mixing), the bias corrections as Adam's.  A plain
// double reference; an old-size PL_AdamParams (1.5) ignores the new fields.
TEST(CpuAdam, FrozenSecondMomentAndGradAsFirstMoment) {
  const double gs[] = {0.5, -2.0, 1e-3, -7.0}, ms[] = {0.1, -0.3, 0.0, 2.0}, vs[] = {0.04, 0.5, 1e-6, 9.0};
  for (int grad_is_m = 0; grad_is_m < 2; ++grad_is_m) {
    Buf p(PL_F32, 4), g(PL_F32, 4), m(PL_F32, 4), v(PL_F32, 4);
    for (int i = 0; i < 4; ++i) p.set(i, 1.0), g.set(i, gs[i]), m.set(i, ms[i]), v.set(i, vs[i]);
    PL_AdamParams cfg = adam(0.01, 0.9, 0.999, 1e-8, 0.1, false);
    cfg.step = 7;
    cfg.freeze_exp_avg_sq = 1;
    cfg.grad_is_exp_avg = grad_is_m;
    plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), &cfg);
    for (int i = 0; i < 4; ++i) {
      const double mi = grad_is_m ? gs[i] : 0.9 * ms[i] + 0.1 * (gs[i] + 0.1 * 1.0);
      const double denom = std::sqrt(vs[i]) / std::sqrt(1 - std::pow(0.999, 7)) + 1e-8;
      EXPECT_NEAR(m.at(i), mi, 1e-6 * std::max(1.0, std::abs(mi))) << i;
      EXPECT_EQ(v.at(i), static_cast<float>(vs[i])) << "exp_avg_sq must stay frozen, " << i;
      const double want = 1.0 - 0.01 / (1 - std::pow(0.9, 7)) * mi / denom;
      EXPECT_NEAR(p.at(i), want, 1e-5 * std::max(1.0, std::abs(want))) << i << " grad_is_m " << grad_is_m;
    }
  }
  // A 1.5 caller's struct (without the new fields) is plain Adam: v moves.
  Buf p(PL_F32, 1), g(PL_F32, 1), m(PL_F32, 1), v(PL_F32, 1);
  p.set(0, 1.0), g.set(0, 0.5);
  PL_AdamParams old = adam(0.01, 0.9, 0.999, 1e-8, 0.0, false);
  old.step = 1;
  old.freeze_exp_avg_sq = 1;  // past struct_size: never read
  old.struct_size = PL_STRUCT_SIZE(PL_AdamParams, decoupled_weight_decay);
  plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), &old);
  EXPECT_GT(v.at(0), 0.0f);
  // grad_is_exp_avg with AdamW's decoupled decay is refused, naming both.
  PL_AdamParams both = adam(0.01, 0.9, 0.999, 1e-8, 0.1, true);
  both.step = 1;
  both.grad_is_exp_avg = 1;
  expect_failure([&] { plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), &both); }, PL_ERR_INVALID_ARGUMENT,
                 {"grad_is_exp_avg", "decoupled_weight_decay"});
}

TEST(CpuAdamErrors, All) {
  Buf p(PL_F32, 4), g(PL_F32, 4), m(PL_F32, 4), v(PL_F32, 4), v3(PL_F32, 3), vh(PL_F16, 4), pi(PL_I64, 4);
  const auto run = [&](PL_AdamParams cfg) { plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), &cfg); };
  PL_AdamParams ok = adam(1e-3, 0.9, 0.999, 1e-8, 0.0, false);
  ok.step = 1;
  PL_AdamParams c = ok;
  c.step = 0;
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"step 0", ">= 1"});
  c = ok;
  c.beta1 = 1.0;
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"beta1 1", "< 1"});
  c = ok;
  c.beta2 = -0.1;
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"beta2 -0.1"});
  c = ok;
  c.beta2 = std::nan("");
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"beta2 nan"});
  c = ok;
  c.lr = -1e-3;
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"lr -0.001"});
  c = ok;
  c.eps = -1e-8;
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"eps -1e-08"});
  c = ok;
  c.weight_decay = -0.5;
  expect_failure([&] { run(c); }, PL_ERR_INVALID_ARGUMENT, {"weight_decay -0.5"});
  expect_failure([&] { plrt::cpu::adam_step(p.get(), g.get(), m.get(), v3.get(), &ok); }, PL_ERR_INVALID_ARGUMENT,
                 {"exp_avg_sq", "3", "4"});
  expect_failure([&] { plrt::cpu::adam_step(p.get(), g.get(), m.get(), vh.get(), &ok); }, PL_ERR_INVALID_ARGUMENT,
                 {"exp_avg_sq", "float16", "float32"});
  expect_failure([&] { plrt::cpu::adam_step(pi.get(), pi.get(), pi.get(), pi.get(), &ok); }, PL_ERR_UNSUPPORTED,
                 {"int64"});
  expect_failure([&] { plrt::cpu::adam_step(p.get(), g.get(), m.get(), v.get(), nullptr); }, PL_ERR_INVALID_ARGUMENT,
                 {"params is NULL"});
  expect_failure([&] { plrt::cpu::adam_step(p.get(), g.get(), nullptr, v.get(), &ok); }, PL_ERR_INVALID_ARGUMENT,
                 {"exp_avg", "NULL"});
  c = ok;
  c.struct_size = 8;
  expect_failure([&] { run(c); }, PL_ERR_VERSION, {"struct_size 8"});
}
