// log(name, pl::Metric&) from a step (TorchMetrics' usual use): the value is the metric over the
// whole epoch, computed when it ends (here a MeanMetric of the rows' first feature, compared with
// the mean computed in the test), the metric is reset for the next epoch, and on_step is refused.
// Across ranks with uneven data: tests/training (SyncDistWithUnequalBatchesGivesTrueValues).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/torchmetrics.hpp>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace callback_test;

struct Logs : Scripted {
  pl::MeanMetric train_mean, val_mean;
  std::vector<int64_t> counts_at_epoch_start;
  bool per_step = false;
  pl::Scalar training_step(const pl::Batch& b, int64_t i) override {
    train_mean.update(b.at(0));  // every feature of the batch
    pl::LogOptions o;
    if (per_step) o.on_step = true;
    log("train_mean", train_mean, o);
    return Scripted::training_step(b, i);
  }
  void validation_step(const pl::Batch& b, int64_t) override {
    val_mean.update(b.at(0));
    log("val_mean", val_mean);
  }
  void on_train_epoch_start() override { counts_at_epoch_start.push_back(train_mean.update_count()); }
};

double mean_of(int64_t n) {  // the mean of dataset(n)'s features
  double s = 0;
  for (int64_t i = 0; i < n * 4; ++i) s += static_cast<double>(std::sin(static_cast<float>(i)));
  return s / static_cast<double>(n * 4);
}

TEST(MetricFromAStep, IsTheWholeEpochsValueAndResetsForTheNext) {
  FitRun run;
  run.o.max_epochs = 2;
  Logs m;
  std::map<std::string, double> got;
  run.fit(m, true, "", [&](pl::Trainer& t) { got = t.callback_metrics(); });
  ASSERT_TRUE(got.count("train_mean")) << "not logged";
  EXPECT_NEAR(got.at("train_mean"), mean_of(12), 1e-6);  // float32 features
  EXPECT_NEAR(got.at("val_mean"), mean_of(4), 1e-6);
  EXPECT_EQ(m.counts_at_epoch_start, (std::vector<int64_t>{0, 0})) << "reset after each epoch";
  EXPECT_EQ(m.train_mean.update_count(), 0);
}

TEST(MetricFromAStep, OnStepIsRefused) {
  FitRun run;
  Logs m;
  m.per_step = true;
  EXPECT_THAT(sdk_test::error_of([&] { run.fit(m); }), HasSubstr("on_step is not supported for a pl::Metric"));
}

}  // namespace
