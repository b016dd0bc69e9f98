// pl::SGD, pl::Adam, pl::AdamW on the cpu accelerator (float64) against straightforward reference
// loops in double over 5 steps, with one parameter's gradient left unwritten in one step; state
// round trips that continue identically; bad options and bad checkpoint state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <plrt/sdk/optim.hpp>
#include <string>
#include <vector>

#include "sdk_test_support.hpp"

using ::testing::HasSubstr;

namespace {

using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;

constexpr int kSteps = 5;
constexpr int kSkipStep = 2;  // parameter 1's gradient is not written in this step

// Two float64 parameters (6 and 3 elements) whose gradients live on the accelerator.
struct Params {
  std::deque<pl::Parameter> p;
  Params(const pl::Accelerator& acc, const std::vector<std::vector<double>>& values) {
    for (const auto& v : values) {
      pl::Parameter x;
      x.value = pl::Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())});
      x.grad = pl::Tensor::zeros(acc, kCpu, x.value.shape(), PL_F64);
      p.push_back(x);
    }
  }
  std::vector<pl::Parameter*> ptrs() {
    std::vector<pl::Parameter*> out;
    for (auto& x : p) out.push_back(&x);
    return out;
  }
  std::vector<double> value(size_t i) const { return p[i].value.to_vector<double>(); }
};

const std::vector<std::vector<double>> kInit = {{0.5, -1, 2, 0.25, -0.75, 1.5}, {3, -2, 0.1}};

double grad_at(int step, size_t param, size_t k) {
  return std::sin(1.3 * step + 0.7 * static_cast<double>(k) + static_cast<double>(param));
}

// Writes step `s`'s gradients (parameter 1 left unwritten in kSkipStep).
void write_grads(Params& ps, int s) {
  for (size_t i = 0; i < ps.p.size(); ++i) {
    ps.p[i].grad_is_zero = true;
    if (i == 1 && s == kSkipStep) continue;
    double* g = ps.p[i].grad.data_ptr<double>();
    for (int64_t k = 0; k < ps.p[i].grad.numel(); ++k) g[k] = grad_at(s, i, static_cast<size_t>(k));
    ps.p[i].grad_is_zero = false;
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-12 * (1 + std::fabs(want[k]))) << what << k;
}

// ---- references: torch.optim's formulas, one parameter at a time ----

void ref_sgd(const pl::SgdOptions& o, std::vector<std::vector<double>>& p) {
  std::vector<std::vector<double>> buf(p.size());
  for (int s = 0; s < kSteps; ++s)
    for (size_t i = 0; i < p.size(); ++i) {
      if (i == 1 && s == kSkipStep) continue;
      if (buf[i].empty() && o.momentum != 0) buf[i].assign(p[i].size(), std::numeric_limits<double>::quiet_NaN());
      const bool first = o.momentum != 0 && std::isnan(buf[i][0]);
      for (size_t k = 0; k < p[i].size(); ++k) {
        double d = grad_at(s, i, k) + o.weight_decay * p[i][k];
        if (o.momentum != 0) {
          buf[i][k] = first ? d : o.momentum * buf[i][k] + (1 - o.dampening) * d;
          d = o.nesterov ? d + o.momentum * buf[i][k] : buf[i][k];
        }
        p[i][k] -= o.lr * d;
      }
    }
}

void ref_adam(const pl::AdamOptions& o, bool decoupled, std::vector<std::vector<double>>& p) {
  std::vector<std::vector<double>> m, v;
  for (const auto& x : p) {
    m.emplace_back(x.size(), 0.0);
    v.emplace_back(x.size(), 0.0);
  }
  std::vector<int> t(p.size(), 0);
  for (int s = 0; s < kSteps; ++s)
    for (size_t i = 0; i < p.size(); ++i) {
      if (i == 1 && s == kSkipStep) continue;
      const int step = ++t[i];
      const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
      for (size_t k = 0; k < p[i].size(); ++k) {
        double g = grad_at(s, i, k);
        if (decoupled)
          p[i][k] *= 1 - o.lr * o.weight_decay;
        else
          g += o.weight_decay * p[i][k];
        m[i][k] = o.beta1 * m[i][k] + (1 - o.beta1) * g;
        v[i][k] = o.beta2 * v[i][k] + (1 - o.beta2) * g * g;
        p[i][k] -= o.lr / bc1 * m[i][k] / (std::sqrt(v[i][k]) / std::sqrt(bc2) + o.eps);
      }
    }
}

void run(pl::Optimizer& opt, Params& ps, int from, int to) {
  for (int s = from; s < to; ++s) {
    write_grads(ps, s);
    opt.step();
  }
}

}  // namespace

TEST(Optim, SgdVariantsMatchTheReference) {
  pl::Accelerator acc(runtime(), "cpu");
  std::vector<std::pair<std::string, pl::SgdOptions>> cases;
  pl::SgdOptions o;
  o.lr = 0.1;
  cases.emplace_back("plain", o);
  o.momentum = 0.9;
  o.dampening = 0.1;
  cases.emplace_back("momentum", o);
  o.dampening = 0;
  o.nesterov = true;
  cases.emplace_back("nesterov", o);
  o.nesterov = false;
  o.weight_decay = 0.05;
  cases.emplace_back("momentum+weight_decay", o);
  pl::SgdOptions wd_only;
  wd_only.lr = 0.2;
  wd_only.weight_decay = 0.3;
  cases.emplace_back("weight_decay", wd_only);
  for (const auto& [label, opts] : cases) {
    Params ps(acc, kInit);
    pl::SGD sgd(ps.ptrs(), opts);
    run(sgd, ps, 0, kSteps);
    auto want = kInit;
    ref_sgd(opts, want);
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(ps.value(i), want[i], label + " param " + std::to_string(i) + " ");
    EXPECT_EQ(sgd.steps(), kSteps);
  }
}

TEST(Optim, AdamAndAdamWMatchTheReference) {
  pl::Accelerator acc(runtime(), "cpu");
  pl::AdamOptions o;
  o.lr = 0.05;
  o.weight_decay = 0.1;
  for (bool decoupled : {false, true}) {
    Params ps(acc, kInit);
    std::unique_ptr<pl::Optimizer> opt =
        decoupled ? std::make_unique<pl::AdamW>(ps.ptrs(), o) : std::make_unique<pl::Adam>(ps.ptrs(), o);
    EXPECT_EQ(opt->name(), decoupled ? "AdamW" : "Adam");
    run(*opt, ps, 0, kSteps);
    auto want = kInit;
    ref_adam(o, decoupled, want);
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(ps.value(i), want[i], opt->name() + " param " + std::to_string(i) + " ");
    // Parameter 1 missed one step: its own count is one lower.
    auto scalars = opt->state_scalars();
    EXPECT_EQ(scalars.at("state.0.step"), kSteps);
    EXPECT_EQ(scalars.at("state.1.step"), kSteps - 1);
    EXPECT_EQ(scalars.at("step"), kSteps);
    EXPECT_EQ(scalars.at("lr"), 0.05);
  }
  EXPECT_EQ(pl::AdamW::defaults().weight_decay, 1e-2);
}

TEST(Optim, UnwrittenAndFrozenGradientsAreSkipped) {
  pl::Accelerator acc(runtime(), "cpu");
  Params ps(acc, kInit);
  pl::Adam adam(ps.ptrs(), pl::AdamOptions{});
  write_grads(ps, 0);
  ps.p[0].requires_grad = false;
  adam.zero_grad();  // every gradient unwritten
  EXPECT_TRUE(ps.p[1].grad_is_zero);
  write_grads(ps, 0);
  ps.p[1].grad_is_zero = true;
  adam.step();
  EXPECT_EQ(ps.value(0), kInit[0]);  // frozen
  EXPECT_EQ(ps.value(1), kInit[1]);  // not written
  EXPECT_TRUE(adam.state_tensors().empty());
  EXPECT_EQ(adam.state_scalars().count("state.1.step"), 0u);
  EXPECT_EQ(adam.steps(), 1);
}

TEST(Optim, StateRoundTripContinuesIdentically) {
  pl::Accelerator acc(runtime(), "cpu");
  pl::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.8;
  pl::AdamOptions ao;
  ao.lr = 0.03;
  using Make = std::function<std::unique_ptr<pl::Optimizer>(Params&, double lr)>;
  const std::vector<Make> makers = {[&](Params& ps, double lr) {
                                      auto o = so;
                                      o.lr = lr;
                                      return std::make_unique<pl::SGD>(ps.ptrs(), o);
                                    },
                                    [&](Params& ps, double lr) {
                                      auto o = ao;
                                      o.lr = lr;
                                      return std::make_unique<pl::AdamW>(ps.ptrs(), o);
                                    }};
  for (const auto& make : makers) {
    Params a(acc, kInit);
    auto opt_a = make(a, 0.1);
    run(*opt_a, a, 0, 3);  // includes the skipped step
    Params b(acc, {a.value(0), a.value(1)});
    auto opt_b = make(b, 999);  // lr comes from the state
    auto tensors = opt_a->state_tensors();
    opt_b->load_state(std::map<std::string, pl::Tensor>(tensors.begin(), tensors.end()), opt_a->state_scalars());
    EXPECT_EQ(opt_b->lr(), 0.1);
    EXPECT_EQ(opt_b->steps(), 3);
    run(*opt_a, a, 3, kSteps);
    run(*opt_b, b, 3, kSteps);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(a.value(i), b.value(i)) << opt_a->name() << " param " << i;
    EXPECT_EQ(opt_a->state_scalars(), opt_b->state_scalars());
  }
}

TEST(Optim, BadOptionsThrowNamingTheValue) {
  pl::Accelerator acc(runtime(), "cpu");
  Params ps(acc, kInit);
  pl::SgdOptions so;
  so.nesterov = true;
  EXPECT_THAT(error_of([&] { pl::SGD(ps.ptrs(), so); }), HasSubstr("nesterov needs momentum > 0"));
  so.momentum = 0.9;
  so.dampening = 0.5;
  EXPECT_THAT(error_of([&] { pl::SGD(ps.ptrs(), so); }), HasSubstr("dampening 0.5"));
  so = pl::SgdOptions{};
  so.lr = -1;
  EXPECT_THAT(error_of([&] { pl::SGD(ps.ptrs(), so); }), HasSubstr("lr -1 is invalid"));
  so.lr = 0.1;
  so.momentum = -0.5;
  EXPECT_THAT(error_of([&] { pl::SGD(ps.ptrs(), so); }), HasSubstr("momentum -0.5"));
  pl::AdamOptions ao;
  ao.beta1 = 1;
  EXPECT_THAT(error_of([&] { pl::Adam(ps.ptrs(), ao); }), HasSubstr("beta1 1 is invalid"));
  ao = pl::AdamOptions{};
  ao.eps = -1e-8;
  EXPECT_THAT(error_of([&] { pl::AdamW(ps.ptrs(), ao); }), HasSubstr("AdamW: eps -1e-08"));
  auto dup = ps.ptrs();
  dup.push_back(dup[0]);
  EXPECT_THAT(error_of([&] { pl::SGD(dup, pl::SgdOptions{}); }), HasSubstr("parameter 2 appears more than once"));

  pl::SGD sgd(ps.ptrs(), pl::SgdOptions{});
  EXPECT_THAT(error_of([&] { sgd.set_lr(-0.5); }), HasSubstr("lr -0.5 is invalid"));
  EXPECT_THAT(error_of([&] { sgd.set_lr(std::nan("")); }), HasSubstr("lr nan is invalid"));
  sgd.set_lr(0.25);
  EXPECT_EQ(sgd.lr(), 0.25);

  // A parameter with no accelerator behind it cannot be stepped.
  pl::Parameter host;
  host.value = pl::Tensor::zeros({2}, PL_F64);
  host.grad = pl::Tensor::zeros({2}, PL_F64);
  host.grad_is_zero = false;
  pl::SGD lost({&host}, pl::SgdOptions{});
  EXPECT_THAT(error_of([&] { lost.step(); }), HasSubstr("parameter 0 has no accelerator"));
}

TEST(Optim, LoadStateRejectsBadNamesShapesAndPartialState) {
  pl::Accelerator acc(runtime(), "cpu");
  Params ps(acc, kInit);
  pl::SgdOptions so;
  so.momentum = 0.9;
  pl::SGD sgd(ps.ptrs(), so);
  auto t6 = pl::Tensor::zeros({6}, PL_F64);
  auto t3 = pl::Tensor::zeros({3}, PL_F64);
  EXPECT_THAT(error_of([&] {
                sgd.load_state({{"state.0.bogus", t6}}, {});
              }),
              HasSubstr("unexpected name 'state.0.bogus'; valid: state.<i>.momentum_buffer with i in [0, 2)"));
  EXPECT_THAT(error_of([&] {
                sgd.load_state({{"state.2.momentum_buffer", t6}}, {});
              }),
              HasSubstr("'state.2.momentum_buffer'"));
  EXPECT_THAT(error_of([&] {
                sgd.load_state({{"state.0.momentum_buffer", t3}}, {});
              }),
              HasSubstr("'state.0.momentum_buffer' is float64 [3] but parameter 0 is float64 [6]"));
  EXPECT_THAT(error_of([&] {
                sgd.load_state({{"state.1.momentum_buffer", pl::Tensor::zeros({3})}}, {});
              }),
              HasSubstr("float32 [3]"));
  EXPECT_THAT(error_of([&] {
                sgd.load_state({}, {{"lr", 0.1}, {"momentum", 0.9}});
              }),
              HasSubstr("unexpected scalar 'momentum'"));
  EXPECT_THAT(error_of([&] { sgd.load_state({}, {{"step", -1}}); }), HasSubstr("'step' = -1"));
  EXPECT_THAT(error_of([&] { sgd.load_state({}, {{"lr", -3}}); }), HasSubstr("lr -3 is invalid"));
  EXPECT_EQ(sgd.lr(), 0.01);  // nothing applied by the failed loads

  pl::Adam adam(ps.ptrs(), pl::AdamOptions{});
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.0.exp_avg", t6}}, {{"state.0.step", 2}});
              }),
              HasSubstr("'state.0.exp_avg_sq' is missing"));
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.1.exp_avg", t3}, {"state.1.exp_avg_sq", t3}}, {});
              }),
              HasSubstr("'state.1.step (a scalar)' is missing"));
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.1.exp_avg", t3}, {"state.1.exp_avg_sq", t3}}, {{"state.1.step", 1.5}});
              }),
              HasSubstr("'state.1.step' = 1.5"));
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.0.momentum_buffer", t6}}, {});
              }),
              HasSubstr("valid: state.<i>.exp_avg, state.<i>.exp_avg_sq"));
  adam.load_state({{"state.1.exp_avg", t3}, {"state.1.exp_avg_sq", t3}}, {{"state.1.step", 4}, {"step", 4}});
  EXPECT_EQ(adam.state_scalars().at("state.1.step"), 4);
  EXPECT_EQ(adam.state_tensors().size(), 2u);
}
