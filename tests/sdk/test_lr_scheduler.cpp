// pl::StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR, OneCycleLR and
// ReduceLROnPlateau against PyTorch's own schedulers (tests/sdk/lr_scheduler_reference.py, run with
// Debian's python3-torch; skipped with the reason where it is missing): the same configurations,
// every value equal in double precision.  Also their bad arguments, and a state round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lr_scheduler.hpp>
#include <plrt/sdk/optim.hpp>
#include <string>

#include "lr_reference.hpp"

namespace {

using ::testing::HasSubstr;

// One parameter is enough: a scheduler only reads and writes the optimizer's lr and momentum.
struct Opt {
  pl::Parameter p;
  std::unique_ptr<pl::Optimizer> opt;
  explicit Opt(bool adam = false, double lr = 0.1) {
    p.value = pl::Tensor::zeros({1}, PL_F64);
    if (adam) {
      pl::AdamOptions o;
      o.lr = lr;
      opt = std::make_unique<pl::Adam>(std::vector<pl::Parameter*>{&p}, o);
    } else {
      pl::SgdOptions o;
      o.lr = lr;
      o.momentum = 0.9;
      opt = std::make_unique<pl::SGD>(std::vector<pl::Parameter*>{&p}, o);
    }
  }
};

using plrt_lr_test::reference;

std::vector<double> values(const nlohmann::json& list) {
  std::vector<double> out;
  for (const auto& v : list) out.push_back(plrt_lr_test::ref_value(v));
  return out;
}

#define NEED_TORCH()                                                                      \
  do {                                                                                    \
    if (reference().contains("error"))                                                    \
      GTEST_SKIP() << "PyTorch's schedulers are not available (Debian's python3-torch): " \
                   << reference()["error"].get<std::string>();                            \
  } while (0)

// Steps `sched` as the reference did (steps-1 times when it stops before total_steps) and compares
// every lr (and momentum) with PyTorch's, exactly.
void expect_same(const std::string& key, pl::Optimizer& opt, const std::function<void()>& step, bool momentum = false) {
  const auto& ref = reference()[key];
  const auto lrs = values(ref["lr"]);
  std::vector<double> ours{opt.lr()}, moms;
  if (momentum) moms.push_back(opt.momentum());
  for (size_t i = 1; i < lrs.size(); ++i) {
    step();
    ours.push_back(opt.lr());
    if (momentum) moms.push_back(opt.momentum());
  }
  for (size_t i = 0; i < lrs.size(); ++i) EXPECT_EQ(ours[i], lrs[i]) << key << ": lr after " << i << " steps";
  if (momentum) {
    const auto ref_moms = values(ref["momentum"]);
    for (size_t i = 0; i < ref_moms.size(); ++i) EXPECT_EQ(moms[i], ref_moms[i]) << key << ": momentum at " << i;
  }
}

TEST(LRScheduler, ChainableSchedulesEqualPyTorchs) {
  NEED_TORCH();
  {
    Opt o;
    pl::StepLR s(*o.opt, 3, 0.5);
    expect_same("step", *o.opt, [&] { s.step(); });
  }
  {
    Opt o;
    pl::MultiStepLR s(*o.opt, {2, 5, 5, 11}, 0.3);
    expect_same("multistep", *o.opt, [&] { s.step(); });
  }
  {
    Opt o;
    pl::ExponentialLR s(*o.opt, 0.93);
    expect_same("exponential", *o.opt, [&] { s.step(); });
  }
  {
    Opt o;
    pl::CosineAnnealingLR s(*o.opt, 7, 0.001);  // 40 steps: down, back up, down again
    expect_same("cosine", *o.opt, [&] { s.step(); });
  }
  {
    Opt o;
    pl::LinearLR s(*o.opt, 0.25, 0.9, 6);
    expect_same("linear", *o.opt, [&] { s.step(); });
  }
}

TEST(LRScheduler, OneCycleEqualsPyTorchsWithItsMomentum) {
  NEED_TORCH();
  {
    Opt o;
    pl::OneCycleOptions c;
    c.max_lr = 0.8;
    c.total_steps = 40;
    pl::OneCycleLR s(*o.opt, c);
    expect_same(
        "onecycle", *o.opt, [&] { s.step(); }, true);
    s.step();                           // the 40th: PyTorch computes it too
    EXPECT_THROW(s.step(), pl::Error);  // past total_steps
  }
  {
    Opt o(true, 1e-3);
    pl::OneCycleOptions c;
    c.max_lr = 0.01;
    c.total_steps = 40;
    c.pct_start = 0.25;
    c.anneal_strategy = "linear";
    c.three_phase = true;
    c.div_factor = 10;
    c.final_div_factor = 100;
    pl::OneCycleLR s(*o.opt, c);
    expect_same(
        "onecycle3", *o.opt, [&] { s.step(); }, true);  // Adam's beta1 cycles
  }
}

TEST(LRScheduler, ReduceLROnPlateauEqualsPyTorchs) {
  NEED_TORCH();
  const std::vector<double> metric{1.0, 0.9, 0.95, 0.95,    0.95, 0.8, 0.85, 0.85, 0.85, 0.85,
                                   0.7, 0.7, 0.7,  0.69995, 0.7,  0.7, 0.7,  0.7,  0.5,  0.6,
                                   0.6, 0.6, 0.6,  0.6,     0.6,  0.6, 0.6,  0.6,  0.6,  0.6};
  {
    Opt o;
    pl::ReduceLROnPlateauOptions c;
    c.factor = 0.5;
    c.patience = 2;
    c.cooldown = 1;
    pl::ReduceLROnPlateau s(*o.opt, c);
    size_t i = 0;
    expect_same("plateau_min", *o.opt, [&] { s.step(metric.at(i++)); });
  }
  {
    Opt o;
    pl::ReduceLROnPlateauOptions c;
    c.mode = "max";
    c.factor = 0.2;
    c.patience = 1;
    c.threshold = 0.05;
    c.threshold_mode = "abs";
    c.min_lr = 0.001;
    pl::ReduceLROnPlateau s(*o.opt, c);
    size_t i = 0;
    expect_same("plateau_max_abs", *o.opt, [&] { s.step(-metric.at(i++)); });
  }
}

// A scheduler restored from its state, over a fresh optimizer, goes on exactly as the original.
TEST(LRScheduler, StateRoundTripContinuesExactly) {
  Opt a, b;
  pl::CosineAnnealingLR sa(*a.opt, 7, 0.001);
  for (int i = 0; i < 9; ++i) sa.step();
  pl::CosineAnnealingLR sb(*b.opt, 7, 0.001);
  sb.load_state(sa.state());
  EXPECT_EQ(b.opt->lr(), a.opt->lr());
  for (int i = 0; i < 10; ++i) {
    sa.step();
    sb.step();
    EXPECT_EQ(b.opt->lr(), a.opt->lr()) << i;
  }
  Opt c, d;
  pl::ReduceLROnPlateau pc(*c.opt), pd(*d.opt);
  for (double v : {1.0, 2.0, 2.0, 2.0}) pc.step(v);
  pd.load_state(pc.state());
  EXPECT_EQ(pd.best(), 1.0);
  EXPECT_EQ(pd.num_bad_epochs(), 3);
  EXPECT_THROW(pd.load_state({{"best", 1.0}}), pl::Error);
  EXPECT_THROW(sb.load_state({{"last_epoch", -1.0}, {"base_lr", 0.1}, {"last_lr", 0.1}}), pl::Error);
}

template <typename F>
void expect_invalid(F make, const std::string& says) {
  try {
    make();
    ADD_FAILURE() << "no error; expected: " << says;
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(says));
  }
}

TEST(LRScheduler, BadArgumentsAreNamed) {
  Opt o;
  auto& opt = *o.opt;
  expect_invalid([&] { pl::StepLR s(opt, 0); }, "StepLR: step_size 0 is invalid; it must be >= 1");
  expect_invalid([&] { pl::StepLR s(opt, 2, -1); }, "StepLR: gamma -1 is invalid");
  expect_invalid([&] { pl::MultiStepLR s(opt, {3, 0}); }, "MultiStepLR: milestone 0 is invalid");
  expect_invalid([&] { pl::ExponentialLR s(opt, 0); }, "ExponentialLR: gamma 0 is invalid");
  expect_invalid([&] { pl::CosineAnnealingLR s(opt, 0); }, "CosineAnnealingLR: t_max 0 is invalid");
  expect_invalid([&] { pl::LinearLR s(opt, 0); }, "LinearLR: start_factor 0 is invalid; it must be in (0, 1]");
  expect_invalid([&] { pl::LinearLR s(opt, 0.5, 1.5); }, "LinearLR: end_factor 1.5 is invalid");
  expect_invalid([&] { pl::LinearLR s(opt, 0.5, 1, 0); }, "LinearLR: total_iters 0 is invalid");
  pl::OneCycleOptions c;
  c.total_steps = 10;
  expect_invalid([&] { pl::OneCycleLR s(opt, c); }, "OneCycleLR: max_lr 0 is invalid");
  c.max_lr = 0.1;
  c.anneal_strategy = "cosine";
  expect_invalid([&] { pl::OneCycleLR s(opt, c); }, "anneal_strategy 'cosine' is invalid; valid: cos, linear");
  c.anneal_strategy = "cos";
  c.pct_start = 1.5;
  expect_invalid([&] { pl::OneCycleLR s(opt, c); }, "pct_start 1.5 is invalid");
  c.pct_start = 0.3;
  c.total_steps = 0;
  expect_invalid([&] { pl::OneCycleLR s(opt, c); }, "total_steps 0 is invalid");
  pl::ReduceLROnPlateauOptions p;
  p.mode = "minimum";
  expect_invalid([&] { pl::ReduceLROnPlateau s(opt, p); }, "mode 'minimum' is invalid; valid: min, max");
  p.mode = "min";
  p.factor = 1;
  expect_invalid([&] { pl::ReduceLROnPlateau s(opt, p); }, "factor 1 is invalid; it must be in (0, 1)");
  p.factor = 0.1;
  pl::ReduceLROnPlateau s(opt, p);
  expect_invalid([&] { s.step(std::nan("")); }, "the monitored value is NaN");
}

}  // namespace
