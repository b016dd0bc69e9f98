// Trainer::predict (Lightning's predict loop): predict_step's outputs in batch order, equal to the
// module's forward on the same rows; limit_predict_batches (count and fraction) and fast_dev_run;
// eval mode during the loop and the module's mode back after; the callbacks' and the module's
// hooks in Lightning's order; a module without predict_step and a bad limit named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "callback_test_support.hpp"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string>* g_calls = nullptr;  // the module's and the callback's hooks, in order

struct Predictor : callback_test::Scripted {
  std::vector<bool> modes;  // training() at each predict_step
  pl::Tensor predict_step(const pl::Batch& b, int64_t i) override {
    modes.push_back(training());
    if (g_calls) g_calls->push_back("predict_step " + std::to_string(i));
    return fc.forward(b.at(0));
  }
  void on_predict_epoch_start() override {
    if (g_calls) g_calls->push_back("module on_predict_epoch_start");
  }
  void on_predict_epoch_end() override {
    if (g_calls) g_calls->push_back("module on_predict_epoch_end");
  }
};

struct Hooks : pl::Callback {
  void setup(pl::Trainer&, pl::LightningBase&, const std::string& stage) override {
    g_calls->push_back("setup " + stage);
  }
  void teardown(pl::Trainer&, pl::LightningBase&, const std::string& stage) override {
    g_calls->push_back("teardown " + stage);
  }
  void on_predict_start(pl::Trainer&, pl::LightningBase&) override { g_calls->push_back("on_predict_start"); }
  void on_predict_end(pl::Trainer&, pl::LightningBase&) override { g_calls->push_back("on_predict_end"); }
  void on_predict_epoch_start(pl::Trainer&, pl::LightningBase&) override {
    g_calls->push_back("on_predict_epoch_start");
  }
  void on_predict_epoch_end(pl::Trainer&, pl::LightningBase&) override { g_calls->push_back("on_predict_epoch_end"); }
  void on_predict_batch_start(pl::Trainer&, pl::LightningBase&, const pl::Batch&, int64_t i) override {
    g_calls->push_back("on_predict_batch_start " + std::to_string(i));
  }
  void on_predict_batch_end(pl::Trainer&, pl::LightningBase&, const pl::Tensor& out, const pl::Batch& b,
                            int64_t i) override {
    g_calls->push_back("on_predict_batch_end " + std::to_string(i) + " rows " + std::to_string(out.shape().at(0)) +
                       "/" + std::to_string(b.at(0).shape().at(0)));
  }
};

std::vector<pl::Tensor> predict(callback_test::FitRun& run, pl::LightningBase& m, int64_t samples = 10) {
  pl::Trainer trainer(run.o, callback_test::FitRun::runtime());
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader loader(callback_test::dataset(samples), lo);
  return trainer.predict(m, loader);
}

TEST(Predict, PredictionsAreTheForwardOfEachBatchInOrder) {
  callback_test::FitRun run;
  Predictor m;
  auto out = predict(run, m);
  ASSERT_EQ(out.size(), 3u);  // 10 rows in batches of 4: 4, 4, 2
  const auto data = callback_test::dataset(10);
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader same(data, lo);
  for (size_t b = 0; b < out.size(); ++b) {
    const auto expected = m.fc.forward(same.batch(static_cast<int64_t>(b)).at(0)).to_vector<float>();
    EXPECT_EQ(out[b].to_vector<float>(), expected) << "batch " << b;
    EXPECT_EQ(out[b].shape(), (pl::Shape{b < 2 ? 4 : 2, 3}));
  }
  EXPECT_THAT(m.modes, ElementsAre(false, false, false)) << "eval mode in the loop";
  EXPECT_TRUE(m.training()) << "the module's mode comes back";
}

TEST(Predict, LimitPredictBatchesAndFastDevRun) {
  for (auto [limit, expect] :
       {std::pair{pl::BatchLimit(2), 2u}, std::pair{pl::BatchLimit(0.5), 1u}, std::pair{pl::BatchLimit(0), 0u}}) {
    callback_test::FitRun run;
    run.o.limit_predict_batches = limit;
    Predictor m;
    EXPECT_EQ(predict(run, m).size(), expect) << limit.text();
  }
  callback_test::FitRun run;
  run.o.fast_dev_run = 1;
  Predictor m;
  EXPECT_EQ(predict(run, m).size(), 1u);
}

TEST(Predict, HooksInLightningsOrder) {
  std::vector<std::string> calls;
  g_calls = &calls;
  callback_test::FitRun run;
  run.o.enable_model_summary = false;
  run.o.callbacks = {std::make_shared<Hooks>()};
  Predictor m;
  predict(run, m, 6);
  g_calls = nullptr;
  EXPECT_THAT(
      calls, ElementsAre("setup predict", "on_predict_start", "on_predict_epoch_start", "module on_predict_epoch_start",
                         "on_predict_batch_start 0", "predict_step 0", "on_predict_batch_end 0 rows 4/4",
                         "on_predict_batch_start 1", "predict_step 1", "on_predict_batch_end 1 rows 2/2",
                         "on_predict_epoch_end", "module on_predict_epoch_end", "on_predict_end", "teardown predict"));
}

TEST(Predict, AModuleWithoutPredictStepAndABadLimitAreNamed) {
  callback_test::FitRun run;
  callback_test::Scripted plain;
  try {
    predict(run, plain);
    FAIL() << "predict without predict_step was accepted";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("predict_step"));
  }
  callback_test::FitRun bad;
  bad.o.limit_predict_batches = pl::BatchLimit(1.5);
  Predictor m;
  try {
    predict(bad, m);
    FAIL() << "limit_predict_batches 1.5 was accepted";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("limit_predict_batches"));
  }
}

}  // namespace
