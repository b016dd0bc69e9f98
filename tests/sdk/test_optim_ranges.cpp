// Optimizer::step(ranges), the host side of a strategy's optimizer_step (ABI 1.4): whole-parameter
// ranges are step() bit for bit with the same checkpoint names; a parameter split into ranges
// that are all stepped equals the whole step (the kernels are element-wise); a partial range
// steps its elements only, with state of its own (checked against torch's formulas written out
// here), saved under "state.<i>.<begin>-<end>.<field>" and restored identically; bad ranges and
// bad range state names are refused before anything changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <functional>
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

const pl::Accelerator& cpu() {
  static pl::Accelerator acc(runtime(), "cpu");
  return acc;
}

// Two float64 parameters of 8 and 5 elements.
struct Params {
  std::deque<pl::Parameter> p;
  Params() {
    for (int64_t n : {8, 5}) {
      std::vector<double> v;
      for (int64_t k = 0; k < n; ++k) v.push_back(0.3 * static_cast<double>(k) - 0.7 + static_cast<double>(n));
      pl::Parameter x;
      x.value = pl::Tensor::from_vector<double>(v, {n});
      x.grad = pl::Tensor::zeros(cpu(), kCpu, x.value.shape(), PL_F64);
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

double grad_at(int step, size_t param, int64_t k) {
  return std::cos(0.9 * step + 0.45 * static_cast<double>(k) - static_cast<double>(param));
}

void write_grads(Params& ps, int s) {
  for (size_t i = 0; i < ps.p.size(); ++i) {
    double* g = ps.p[i].grad.data_ptr<double>();
    for (int64_t k = 0; k < ps.p[i].grad.numel(); ++k) g[k] = grad_at(s, i, k);
    ps.p[i].grad_is_zero = false;
  }
}

using Make = std::function<std::unique_ptr<pl::Optimizer>(std::vector<pl::Parameter*>)>;

std::vector<std::pair<std::string, Make>> optimizers() {
  return {
      {"SGD momentum nesterov wd",
       [](auto p) {
         pl::SgdOptions o;
         o.lr = 0.1, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.01;
         return std::make_unique<pl::SGD>(p, o);
       }},
      {"SGD plain",
       [](auto p) {
         return std::make_unique<pl::SGD>(p, pl::SgdOptions{0.05, 0, 0, 0, false});
       }},
      {"Adam",
       [](auto p) {
         return std::make_unique<pl::Adam>(p, pl::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.02});
       }},
      {"AdamW", [](auto p) { return std::make_unique<pl::AdamW>(p); }},
  };
}

std::vector<pl::ParamRange> whole_ranges() { return {{0, 0, 8}, {1, 0, 5}}; }
std::vector<pl::ParamRange> split_ranges() { return {{1, 2, 5}, {0, 0, 3}, {1, 0, 2}, {0, 3, 8}}; }

// Four steps with the same gradients: one optimizer on `a` whole, one on `b` by `ranges`.
std::pair<std::unique_ptr<pl::Optimizer>, std::unique_ptr<pl::Optimizer>> step_both(
    const Make& make, Params& a, Params& b, const std::vector<pl::ParamRange>& ranges) {
  auto oa = make(a.ptrs()), ob = make(b.ptrs());
  for (int s = 0; s < 4; ++s) {
    write_grads(a, s), write_grads(b, s);
    oa->step();
    ob->step(ranges);
  }
  return {std::move(oa), std::move(ob)};
}

TEST(OptimRanges, WholeRangesAreStepBitForBitWithTheSameNames) {
  for (const auto& [what, make] : optimizers()) {
    Params a, b;
    auto [oa, ob] = step_both(make, a, b, whole_ranges());
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(a.value(i), b.value(i)) << what << " parameter " << i;
    auto ta = oa->state_tensors(), tb = ob->state_tensors();
    ASSERT_EQ(ta.size(), tb.size()) << what;
    for (size_t k = 0; k < ta.size(); ++k) {
      EXPECT_EQ(ta[k].first, tb[k].first) << what;
      EXPECT_EQ(ta[k].second.to_vector<double>(), tb[k].second.to_vector<double>()) << what << " " << ta[k].first;
    }
    EXPECT_EQ(oa->state_scalars(), ob->state_scalars()) << what;
    EXPECT_EQ(ob->steps(), 4);
  }
}

TEST(OptimRanges, SplitRangesSteppedTogetherEqualTheWholeStep) {
  for (const auto& [what, make] : optimizers()) {
    Params a, b;
    step_both(make, a, b, split_ranges());
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(a.value(i), b.value(i)) << what << " parameter " << i;
  }
}

// torch's Adam on the elements of one range, in double, written out.
std::vector<double> adam_reference(std::vector<double> p, size_t param, int64_t begin, int steps, double lr, double b1,
                                   double b2, double eps) {
  std::vector<double> m(p.size(), 0), v(p.size(), 0);
  for (int s = 0; s < steps; ++s)
    for (size_t k = 0; k < p.size(); ++k) {
      const double g = grad_at(s, param, begin + static_cast<int64_t>(k));
      m[k] = b1 * m[k] + (1 - b1) * g;
      v[k] = b2 * v[k] + (1 - b2) * g * g;
      const double mh = m[k] / (1 - std::pow(b1, s + 1)), vh = v[k] / (1 - std::pow(b2, s + 1));
      p[k] -= lr * mh / (std::sqrt(vh) + eps);
    }
  return p;
}

TEST(OptimRanges, APartialRangeStepsItsElementsOnlyWithStateOfItsOwn) {
  Params ps;
  const auto init0 = ps.value(0), init1 = ps.value(1);
  pl::Adam adam(ps.ptrs(), pl::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0});
  for (int s = 0; s < 3; ++s) {
    write_grads(ps, s);
    adam.step({{0, 2, 6}});  // elements 2..5 of parameter 0; parameter 1 not named
  }
  auto got = ps.value(0);
  auto want = adam_reference(std::vector<double>(init0.begin() + 2, init0.begin() + 6), 0, 2, 3, 0.01, 0.9, 0.99, 1e-8);
  for (size_t k = 0; k < 8; ++k) {
    if (k < 2 || k >= 6)
      EXPECT_EQ(got[k], init0[k]) << "element " << k << " is outside the range";
    else
      EXPECT_NEAR(got[k], want[k - 2], 1e-12) << "element " << k;
  }
  EXPECT_EQ(ps.value(1), init1);
  std::vector<std::string> names;
  for (const auto& [name, t] : adam.state_tensors()) {
    names.push_back(name);
    EXPECT_EQ(t.shape(), pl::Shape{4}) << name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"state.0.2-6.exp_avg", "state.0.2-6.exp_avg_sq"}));
  EXPECT_EQ(adam.state_scalars().at("state.0.2-6.step"), 3);
  EXPECT_EQ(adam.state_scalars().count("state.0.step"), 0u);
}

TEST(OptimRanges, PartialRangeStateRoundTripsAndContinuesIdentically) {
  for (const auto& [what, make] : optimizers()) {
    Params a, b;
    auto oa = make(a.ptrs()), ob = make(b.ptrs());
    for (int s = 0; s < 2; ++s) {
      write_grads(a, s), write_grads(b, s);
      oa->step(split_ranges());
      ob->step(split_ranges());
    }
    // b's state goes through a checkpoint-like copy into a fresh optimizer over b's parameters
    std::map<std::string, pl::Tensor> tensors;
    for (const auto& [name, t] : ob->state_tensors()) tensors[name] = t.clone();
    const auto scalars = ob->state_scalars();
    auto oc = make(b.ptrs());
    oc->load_state(tensors, scalars);
    EXPECT_EQ(oc->state_scalars(), scalars) << what;
    for (int s = 2; s < 5; ++s) {
      write_grads(a, s), write_grads(b, s);
      oa->step(split_ranges());
      oc->step(split_ranges());
    }
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(a.value(i), b.value(i)) << what << " parameter " << i;
  }
}

TEST(OptimRanges, BadRangesAreRefusedBeforeAnyUpdate) {
  Params ps;
  ps.p[1].requires_grad = false;
  pl::SGD sgd(ps.ptrs(), pl::SgdOptions{0.1, 0.9, 0, 0, false});
  write_grads(ps, 0);
  const auto before = ps.value(0);
  struct Case {
    std::vector<pl::ParamRange> ranges;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {{{0, 0, 4}, {2, 0, 1}}, {"range 1", "parameter 2", "valid: 0 to 2 - 1"}},
      {{{0, 0, 4}, {0, 5, 3}}, {"range 1", "[5, 3)", "0 <= begin <= end <= 8"}},
      {{{0, 0, 9}}, {"range 0", "[0, 9)", "<= 8"}},
      {{{0, -1, 2}}, {"range 0", "[-1, 2)"}},
      {{{0, 4, 8}, {0, 0, 5}}, {"overlap", "[0, 5)", "[4, 8)"}},
      {{{0, 0, 4}, {1, 0, 5}}, {"range 1", "frozen"}},
  };
  for (const auto& c : cases) {
    std::string msg = error_of([&] { sgd.step(c.ranges); });
    for (const auto& s : c.says) EXPECT_THAT(msg, HasSubstr(s));
    EXPECT_EQ(ps.value(0), before) << msg;
  }
  EXPECT_EQ(sgd.steps(), 0);
  EXPECT_TRUE(sgd.state_tensors().empty());
  sgd.step({{0, 4, 4}, {0, 0, 4}, {0, 4, 8}});  // touching and empty ranges are fine
  EXPECT_EQ(sgd.steps(), 1);
}

TEST(OptimRanges, AnUnwrittenGradientIsSkippedInRangesToo) {
  Params ps;
  pl::SGD sgd(ps.ptrs(), pl::SgdOptions{0.1, 0, 0, 0, false});
  const auto before = ps.value(1);
  write_grads(ps, 0);
  ps.p[1].grad_is_zero = true;
  sgd.step({{0, 0, 4}, {1, 1, 3}});
  EXPECT_EQ(ps.value(1), before);
  EXPECT_NE(ps.value(0)[0], Params().value(0)[0]);
}

TEST(OptimRanges, BadRangeStateNamesAreRefused) {
  Params ps;
  pl::Adam adam(ps.ptrs(), pl::AdamOptions{});
  auto t4 = pl::Tensor::zeros({4}, PL_F64);
  std::map<std::string, double> step{{"state.0.2-6.step", 1}};
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.0.2-9.exp_avg", t4}}, {});
              }),
              HasSubstr("0 <= begin < end <= 8"));
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.0.0-8.exp_avg", pl::Tensor::zeros({8}, PL_F64)}}, {});
              }),
              HasSubstr("not the whole parameter"));
  EXPECT_THAT(error_of([&] { adam.load_state({{"state.0.2-x.exp_avg", t4}}, {}); }), HasSubstr("unexpected name"));
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.0.2-6.exp_avg", pl::Tensor::zeros({3}, PL_F64)}}, step);
              }),
              HasSubstr("needs float64 [4]"));
  EXPECT_THAT(error_of([&] {
                adam.load_state({{"state.0.2-6.exp_avg", t4}}, step);
              }),
              HasSubstr("state.0.2-6.exp_avg_sq"));
  adam.load_state({{"state.0.2-6.exp_avg", t4}, {"state.0.2-6.exp_avg_sq", t4}}, step);
  EXPECT_EQ(adam.state_tensors().size(), 2u);
}

}  // namespace
