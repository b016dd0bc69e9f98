// pl::EarlyStopping in one process against Lightning's rules, with the epoch each script stops at
// worked out by hand in the comments: patience, min_delta, mode, the thresholds, non-finite values,
// checks only at validated epochs, strict, and each bad option named.  (Ranks that disagree:
// tests/training/test_callbacks_ranks.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <plrt/sdk/early_stopping.hpp>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace callback_test;

// Fits with EarlyStopping(options) over `script` (max_epochs 10); returns the epochs trained.
int64_t epochs_until_stop(const std::vector<double>& script, pl::EarlyStoppingOptions o,
                          std::shared_ptr<pl::EarlyStopping>* out = nullptr, int check_every = 1) {
  FitRun run;
  run.o.max_epochs = 10;
  run.o.check_val_every_n_epoch = check_every;
  auto es = std::make_shared<pl::EarlyStopping>(o);
  if (out) *out = es;
  run.o.callbacks = {es};
  Scripted m;
  m.val_script = script;
  return run.fit(m);
}

pl::EarlyStoppingOptions on_val_loss(int64_t patience) {
  pl::EarlyStoppingOptions o;
  o.monitor = "val_loss";
  o.patience = patience;
  return o;
}

TEST(EarlyStopping, StopsAfterPatienceChecksWithoutImprovement) {
  // best 1.0, 0.9; then 0.95 (wait 1), 0.92 (wait 2 = patience): stops after epoch 3
  std::shared_ptr<pl::EarlyStopping> es;
  EXPECT_EQ(epochs_until_stop({1.0, 0.9, 0.95, 0.92, 0.91, 0.5}, on_val_loss(2), &es), 4);
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_DOUBLE_EQ(es->best_score(), 0.9);
  EXPECT_THAT(es->stop_reason(), HasSubstr("did not improve in the last 2 checks"));
  // an improvement resets the count: 0.95 (1), 0.85 (best), 0.86 (1), 0.87 (2): after epoch 5
  EXPECT_EQ(epochs_until_stop({1.0, 0.9, 0.95, 0.85, 0.86, 0.87}, on_val_loss(2)), 6);
  // never worse: all 10 epochs
  EXPECT_EQ(epochs_until_stop({1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1}, on_val_loss(1)), 10);
}

TEST(EarlyStopping, MinDeltaAndModeMax) {
  auto o = on_val_loss(2);
  o.min_delta = 0.05;  // 0.97 and 0.96 are not below 1.0 - 0.05: waits 1, 2 -> after epoch 2
  EXPECT_EQ(epochs_until_stop({1.0, 0.97, 0.96, 0.5}, o), 3);
  auto mx = on_val_loss(1);
  mx.mode = "max";  // 0.5, 0.6 best, 0.55 (wait 1 = patience): after epoch 2
  EXPECT_EQ(epochs_until_stop({0.5, 0.6, 0.55, 0.9}, mx), 3);
}

TEST(EarlyStopping, ThresholdsAndNonFiniteValuesStopAtOnce) {
  auto o = on_val_loss(100);
  o.stopping_threshold = 0.5;  // 0.4 < 0.5: after epoch 1
  std::shared_ptr<pl::EarlyStopping> es;
  EXPECT_EQ(epochs_until_stop({1.0, 0.4, 0.3}, o, &es), 2);
  EXPECT_THAT(es->stop_reason(), HasSubstr("stopping threshold"));
  auto d = on_val_loss(100);
  d.divergence_threshold = 2.0;  // 3.0 > 2.0: after epoch 1
  EXPECT_EQ(epochs_until_stop({1.0, 3.0, 0.3}, d, &es), 2);
  EXPECT_THAT(es->stop_reason(), HasSubstr("diverged"));
  EXPECT_EQ(epochs_until_stop({1.0, std::numeric_limits<double>::quiet_NaN(), 0.3}, on_val_loss(100), &es), 2);
  EXPECT_THAT(es->stop_reason(), HasSubstr("not finite"));
  auto nf = on_val_loss(100);
  nf.check_finite = false;  // NaN is only never better
  EXPECT_EQ(epochs_until_stop({1.0, std::numeric_limits<double>::quiet_NaN(), 0.3}, nf), 10);
}

TEST(EarlyStopping, ChecksOnlyAtValidatedEpochs) {
  // validation at epochs 1, 3, 5, ... (check_val_every_n_epoch 2); values 1.0 at 1, 0.9 at 3,
  // 0.95 at 5 (wait 1 = patience): stops after epoch 5, not earlier
  std::shared_ptr<pl::EarlyStopping> es;
  EXPECT_EQ(epochs_until_stop({9, 1.0, 9, 0.9, 9, 0.95, 9}, on_val_loss(1), &es, 2), 6);
  EXPECT_EQ(es->stopped_epoch(), 5);
}

TEST(EarlyStopping, AMonitorNotLogged) {
  auto o = on_val_loss(1);
  o.monitor = "val_acc";
  const std::string e = sdk_test::error_of([&] { epochs_until_stop({1.0}, o); });
  EXPECT_THAT(e, HasSubstr("EarlyStopping is conditioned on 'val_acc', which was not logged"));
  EXPECT_THAT(e, HasSubstr("logged: train_loss, val_loss"));
  o.strict = false;  // warned, skipped: every epoch runs
  EXPECT_EQ(epochs_until_stop({1.0}, o), 10);
}

TEST(EarlyStopping, StateComesBackOnResume) {
  // 3 epochs (1.0, 0.9, 0.95: wait 1), then resumed: 0.92 makes wait 2 = patience, after epoch 3
  FitRun run;
  run.o.max_epochs = 3;
  auto es1 = std::make_shared<pl::EarlyStopping>(on_val_loss(2));
  run.o.callbacks = {es1};
  Scripted m1;
  m1.val_script = {1.0, 0.9, 0.95, 0.92, 0.91};
  run.fit(m1);
  EXPECT_EQ(es1->wait_count(), 1);
  run.o.max_epochs = 10;
  auto es2 = std::make_shared<pl::EarlyStopping>(on_val_loss(2));
  run.o.callbacks = {es2};
  Scripted m2;
  m2.val_script = m1.val_script;
  EXPECT_EQ(run.fit(m2, true, "last"), 4);
  EXPECT_EQ(es2->stopped_epoch(), 3);
}

TEST(EarlyStopping, BadOptionsAreNamed) {
  auto err = [](auto edit) {
    pl::EarlyStoppingOptions o;
    o.monitor = "val_loss";
    edit(o);
    return sdk_test::error_of([&] { pl::EarlyStopping e(o); });
  };
  EXPECT_THAT(err([](auto& o) { o.monitor = ""; }), HasSubstr("needs a monitor"));
  EXPECT_THAT(err([](auto& o) { o.mode = "up"; }), HasSubstr("mode 'up' is not valid; valid: min, max"));
  EXPECT_THAT(err([](auto& o) { o.patience = -1; }), HasSubstr("patience -1 is not valid"));
  EXPECT_THAT(err([](auto& o) { o.min_delta = std::numeric_limits<double>::infinity(); }),
              HasSubstr("min_delta inf is not valid"));
  EXPECT_THAT(err([](auto& o) { o.stopping_threshold = std::numeric_limits<double>::quiet_NaN(); }),
              HasSubstr("stopping_threshold is NaN"));
}

}  // namespace
