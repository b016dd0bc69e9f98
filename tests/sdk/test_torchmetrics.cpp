// pl::Accuracy, F1Score, AUROC, MeanSquaredError, MeanMetric (torchmetrics.hpp): fed in uneven
// batches, in one process and on 2 and 3 ranks (threads over gloo) with uneven shards (a rank
// with no data included), each equals the reference computed here on the union of the data
// (metric_test_data.hpp, written independently); then reset, repeated compute, and every bad input.
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/torchmetrics.hpp>

#include "metric_test_data.hpp"
#include "sdk_test_support.hpp"

namespace {

using namespace metric_test;
using sdk_test::error_of;

constexpr double kTol = 1e-12;

// Every metric of the suite, fed rows [b, e) of `d` in batches of 7.
struct Suite {
  explicit Suite(int64_t c)
      : acc(c), f1_macro(c, pl::F1Score::Average::Macro), f1_micro(c, pl::F1Score::Average::Micro), auroc(c) {}
  pl::Accuracy acc;
  pl::F1Score f1_macro, f1_micro;
  pl::AUROC auroc;
  pl::MeanSquaredError mse;
  pl::MeanMetric mean;
  std::vector<pl::Metric*> all() { return {&acc, &f1_macro, &f1_micro, &auroc, &mse, &mean}; }

  void feed(const Data& d, int64_t b, int64_t e) {
    batches(b, e, 7, [&](int64_t i, int64_t j) {
      acc.update(probs_rows(d, i, j), target_rows(d, i, j));
      f1_macro.update(probs_rows(d, i, j), target_rows(d, i, j));
      f1_micro.update(probs_rows(d, i, j), target_rows(d, i, j));
      auroc.update(probs_rows(d, i, j), target_rows(d, i, j));
      mse.update(rows(d.reg_pred, i, j), rows(d.reg_target, i, j));
      mean.update(rows(d.reg_pred, i, j), rows(d.weight, i, j));
    });
  }
  void expect_reference(const Data& d, const std::string& where) {
    SCOPED_TRACE(where);
    EXPECT_EQ(acc.compute(), ref_accuracy(d));  // the same two integers divided
    EXPECT_NEAR(f1_macro.compute(), ref_f1(d, true), kTol);
    EXPECT_NEAR(f1_micro.compute(), ref_f1(d, false), kTol);
    EXPECT_NEAR(auroc.compute(), ref_auroc_ovr(d), kTol);
    EXPECT_NEAR(mse.compute(), ref_mse(d), kTol);
    EXPECT_NEAR(mean.compute(), ref_weighted_mean(d), kTol);
  }
};

TEST(TorchMetrics, OneProcessEqualsTheReferenceOnTheData) {
  for (bool coarse : {false, true}) {
    const Data d = make_data(203, 4, 11, coarse);
    Suite s(4);
    s.feed(d, 0, d.n);
    s.expect_reference(d, coarse ? "tied scores" : "distinct scores");
    s.expect_reference(d, "computed again: the states are unchanged");
  }
}

TEST(TorchMetrics, ResetStartsAgainAndUpdatesAfterComputeCount) {
  const Data first = make_data(50, 3, 1), second = make_data(61, 3, 2);
  Suite s(3);
  s.feed(first, 0, 30);
  (void)s.acc.compute();  // a compute in the middle changes nothing
  s.feed(first, 30, first.n);
  s.expect_reference(first, "epoch 1");
  for (auto* m : s.all()) m->reset();
  EXPECT_EQ(s.acc.update_count(), 0);
  s.feed(second, 0, second.n);
  s.expect_reference(second, "epoch 2 after reset");
}

TEST(TorchMetrics, BinaryAurocWithTiesEqualsPairwiseReference) {
  const Data d = make_data(157, 2, 5, /*coarse=*/true);
  pl::AUROC auroc(2);
  batches(0, d.n, 10, [&](int64_t i, int64_t j) {
    std::vector<double> col1;
    for (int64_t k = i; k < j; ++k) col1.push_back(d.probs[static_cast<size_t>(k * 2 + 1)]);
    auroc.update(pl::Tensor::from_vector(col1, {j - i}), target_rows(d, i, j));
  });
  EXPECT_NEAR(auroc.compute(), ref_auroc_column(d, 1, [&](size_t i) { return d.target[i] == 1; }), kTol);
}

TEST(TorchMetrics, MacroF1LeavesOutClassesAbsentFromTargetsAndPredictions) {
  // 5 classes; 3 and 4 never occur.  Per class: 0: 2/3, 1: 1/2, 2 (predicted only): 0.
  pl::F1Score f1(5);
  f1.update(pl::Tensor::from_vector<int64_t>({0, 0, 1, 2}, {4}), pl::Tensor::from_vector<int64_t>({0, 1, 1, 1}, {4}));
  EXPECT_NEAR(f1.compute(), (2.0 / 3 + 0.5 + 0) / 3, kTol);
  pl::F1Score micro(5, pl::F1Score::Average::Micro);
  micro.update(pl::Tensor::from_vector<int32_t>({0, 0, 1, 2}, {4}),
               pl::Tensor::from_vector<int32_t>({0, 1, 1, 1}, {4}));
  EXPECT_EQ(micro.compute(), 0.5);
}

// One rank's part of the multi-rank runs: its shard of `d` into a suite synced over `pg`.
void rank_suite(const Data& d, int world, int rank, const pl::ProcessGroup& pg) {
  const auto b = shard_bounds(d.n, world);
  Suite s(d.c);
  auto sync = std::make_shared<pl::ProcessGroupSync>(pg);
  for (auto* m : s.all()) m->set_sync(sync);
  s.feed(d, b[static_cast<size_t>(rank)], b[static_cast<size_t>(rank) + 1]);
  s.expect_reference(d, "rank " + std::to_string(rank) + " of " + std::to_string(world));
  // the local states are kept: computed again, and after a reset of every rank, a new epoch
  s.expect_reference(d, "again on rank " + std::to_string(rank));
}

TEST(TorchMetrics, TwoRanksWithUnevenShardsEqualTheUnion) {
  const Data d = make_data(97, 3, 21);
  ASSERT_NE(shard_bounds(d.n, 2)[1], d.n - shard_bounds(d.n, 2)[1]);  // uneven
  run_ranks(2, [&](int r, const pl::ProcessGroup& pg) { rank_suite(d, 2, r, pg); });
}

TEST(TorchMetrics, ThreeRanksWithUnevenShardsAndTiesEqualTheUnion) {
  const Data d = make_data(131, 5, 33, /*coarse=*/true);
  run_ranks(3, [&](int r, const pl::ProcessGroup& pg) { rank_suite(d, 3, r, pg); });
}

TEST(TorchMetrics, ARankWithNoDataStillTakesPart) {
  const Data d = make_data(40, 3, 8);
  run_ranks(3, [&](int r, const pl::ProcessGroup& pg) {
    Suite s(3);
    auto sync = std::make_shared<pl::ProcessGroupSync>(pg);
    for (auto* m : s.all()) m->set_sync(sync);
    if (r == 1) s.feed(d, 0, d.n);  // ranks 0 and 2 have nothing
    s.expect_reference(d, "rank " + std::to_string(r));
  });
}

// A metric of the user's own (as a TorchMetrics subclass would be): the range max - min of every
// value seen, per column of two, on Max and Min states, plus a Cat state of its int64 counts.
class Range : public pl::Metric {
 public:
  Range() : pl::Metric("Range") {
    add_state("max", pl::StateReduce::Max, 2, -INFINITY);
    add_state("min", pl::StateReduce::Min, 2, INFINITY);
    add_int_state("counts", pl::StateReduce::Cat, 0, 0);
  }
  void update(const std::vector<double>& pairs) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      state(0).f64[i % 2] = std::max(state(0).f64[i % 2], pairs[i]);
      state(1).f64[i % 2] = std::min(state(1).f64[i % 2], pairs[i]);
    }
    state(2).i64.push_back(static_cast<int64_t>(pairs.size()));
    count_update();
  }

 protected:
  // column 0's range + 1000 * column 1's range + 1e6 * the number of updates on every rank
  double compute_from(const std::vector<pl::MetricState>& s) const override {
    return (s[0].f64[0] - s[1].f64[0]) + 1000 * (s[0].f64[1] - s[1].f64[1]) +
           1e6 * static_cast<double>(s[2].i64.size());
  }
};

TEST(TorchMetrics, MaxMinAndCatStatesOfAUserMetricCombineAcrossRanks) {
  // rank r's pairs: (r - 1, 50 on rank 1 else 10 r), (2 r, -r); rank 2 updates twice; each state's
  // extremes come from different ranks (rank 0's min, rank 1's max, rank 2's), so no one rank's will do
  const double want = (4 - (-1)) + 1000 * (50 - (-2)) + 1e6 * 4;
  run_ranks(3, [&](int r, const pl::ProcessGroup& pg) {
    Range m;
    m.update({r - 1.0, r == 1 ? 50.0 : 10.0 * r, 2.0 * r, -1.0 * r});
    if (r == 2) m.update({0, 0});
    EXPECT_EQ(m.compute(pl::ProcessGroupSync(pg)), want) << "rank " << r;
  });
  Range alone;  // no sync: local
  alone.update({1, 5, 3, 2});
  EXPECT_EQ(alone.compute(), 2 + 1000 * 3 + 1e6);
}

TEST(TorchMetrics, Float32ScoresAndInt32IdsCountAsFloat64AndInt64) {
  const Data d = make_data(64, 3, 3);
  std::vector<float> f32(d.probs.begin(), d.probs.end());
  std::vector<int32_t> t32(d.target.begin(), d.target.end());
  pl::Accuracy a32(3), a64(3);
  pl::AUROC u32(3), u64(3);
  a32.update(pl::Tensor::from_vector(f32, {64, 3}), pl::Tensor::from_vector(t32, {64}));
  a64.update(probs_rows(d, 0, 64), target_rows(d, 0, 64));
  u32.update(pl::Tensor::from_vector(f32, {64, 3}), pl::Tensor::from_vector(t32, {64}));
  u64.update(probs_rows(d, 0, 64), target_rows(d, 0, 64));
  EXPECT_EQ(a32.compute(), a64.compute());
  EXPECT_EQ(a32.compute(), ref_accuracy(d));
  EXPECT_NEAR(u32.compute(), u64.compute(), 1e-6);  // float32 rounding may tie or untie scores
}

TEST(TorchMetrics, RanksWithDifferentMetricArgumentsAreRefusedByName) {
  run_ranks(2, [&](int r, const pl::ProcessGroup& pg) {
    pl::F1Score f1(r == 0 ? 3 : 4);
    f1.update(pl::Tensor::from_vector<int64_t>({0, 1}, {2}), pl::Tensor::from_vector<int64_t>({0, 2}, {2}));
    const std::string e = error_of([&] { f1.compute(pl::ProcessGroupSync(pg)); });
    EXPECT_NE(e.find("state 'tp'"), std::string::npos) << e;
    EXPECT_NE(e.find("same metric with the same arguments"), std::string::npos) << e;
  });
}

TEST(TorchMetrics, ComputeWithNoDataIsRefusedByName) {
  pl::Accuracy acc(3);
  pl::F1Score f1(3);
  pl::AUROC auroc(3);
  pl::MeanSquaredError mse;
  pl::MeanMetric mean;
  for (pl::Metric* m : std::vector<pl::Metric*>{&acc, &f1, &auroc, &mse}) {
    const std::string e = error_of([&] { m->compute(); });
    EXPECT_NE(e.find(m->name() + ": compute() with no samples"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { mean.compute(); }).find("total weight of 0"), std::string::npos);
}

TEST(TorchMetrics, AurocOfAClassWithoutPositivesIsRefused) {
  pl::AUROC binary(2);
  binary.update(pl::Tensor::from_vector<double>({0.1, 0.7}, {2}), pl::Tensor::from_vector<int64_t>({0, 0}, {2}));
  EXPECT_NE(error_of([&] { binary.compute(); }).find("the target has no positive sample"), std::string::npos);
  pl::AUROC ovr(3);
  ovr.update(pl::Tensor::from_vector<double>({.2, .3, .5, .6, .3, .1}, {2, 3}),
             pl::Tensor::from_vector<int64_t>({0, 1}, {2}));
  EXPECT_NE(error_of([&] { ovr.compute(); }).find("class 2 has no positive sample"), std::string::npos);
}

TEST(TorchMetrics, BadInputsAreRefusedBeforeAnyStateChanges) {
  using pl::Tensor;
  EXPECT_NE(error_of([] { pl::Accuracy a(1); }).find("num_classes=1 is not valid: it must be >= 2"), std::string::npos);
  EXPECT_NE(error_of([] { pl::F1Score f(0); }).find("num_classes=0"), std::string::npos);
  EXPECT_NE(error_of([] { pl::AUROC a(-3); }).find("num_classes=-3"), std::string::npos);
  pl::Accuracy acc(3);
  const Tensor t2 = Tensor::from_vector<int64_t>({0, 1}, {2});
  auto msg = [&](const std::function<void()>& f) { return error_of(f); };
  EXPECT_NE(msg([&] {
              acc.update(Tensor::from_vector<double>({1, 2}, {1, 2}), t2);
            }).find("[N, 3] scores"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              acc.update(Tensor::from_vector<int64_t>({0, 3}, {2}), t2);
            }).find("preds[1] is 3; class ids must be in [0, 3)"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              acc.update(t2, Tensor::from_vector<int64_t>({0, -1}, {2}));
            }).find("target[1] is -1"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              acc.update(t2, Tensor::from_vector<double>({0, 1}, {2}));
            }).find("target has dtype float64; class ids must be int32 or int64"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              acc.update(t2, Tensor::from_vector<int64_t>({0, 1, 2}, {3}));
            }).find("preds has 2 samples but target has 3"),
            std::string::npos);
  EXPECT_NE(msg([&] { acc.update(t2, Tensor()); }).find("target is an undefined tensor"), std::string::npos);
  EXPECT_NE(msg([&] {
              acc.update(Tensor::from_vector<double>({0, NAN, 1, 0, 0, 1}, {2, 3}), t2);
            }).find("preds[1] is nan; scores must be finite"),
            std::string::npos);
  EXPECT_EQ(acc.update_count(), 0);
  EXPECT_EQ(acc.states()[1].i64[0], 0);  // nothing counted
  pl::AUROC auroc(2);
  EXPECT_NE(msg([&] {
              auroc.update(Tensor::from_vector<double>({.1, .2, .3, .4}, {2, 2}), t2);
            }).find("[N] scores of the positive class"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              auroc.update(Tensor::from_vector<double>({.1, .2}, {2}), Tensor::from_vector<int64_t>({0, 2}, {2}));
            }).find("target[1] is 2; class ids must be in [0, 2)"),
            std::string::npos);
  EXPECT_TRUE(auroc.states()[0].f64.empty());
  pl::MeanSquaredError mse;
  EXPECT_NE(msg([&] {
              mse.update(Tensor::from_vector<double>({1}, {1}), Tensor::from_vector<int32_t>({1}, {1}));
            }).find("target has dtype int32; scores must be float32 or float64"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              mse.update(Tensor::from_vector<double>({1}, {1}), Tensor::from_vector<double>({1, 2}, {2}));
            }).find("preds has 1 samples but target has 2"),
            std::string::npos);
  pl::MeanMetric mean;
  EXPECT_NE(msg([&] { mean.update(1.0, -1.0); }).find("weight -1.000000 is not valid"), std::string::npos);
  EXPECT_NE(msg([&] { mean.update(INFINITY); }).find("is not finite"), std::string::npos);
  EXPECT_NE(msg([&] {
              mean.update(Tensor::from_vector<double>({1, 2}, {2}), Tensor::from_vector<double>({1, -2}, {2}));
            }).find("weights[1] is -2.000000; weights must be >= 0"),
            std::string::npos);
  EXPECT_EQ(mean.update_count(), 0);
}

TEST(TorchMetrics, LogOfAMetricOutsideATrainerIsRefused) {
  struct M : pl::LightningModule {
    pl::Scalar training_step(const pl::Batch&, int64_t) override { return 0; }
    std::unique_ptr<pl::Optimizer> configure_optimizers() override { return nullptr; }
  } m;
  pl::Accuracy acc(2);
  EXPECT_NE(error_of([&] { m.log("val_acc", acc); }).find("needs a trainer"), std::string::npos);
}

}  // namespace
