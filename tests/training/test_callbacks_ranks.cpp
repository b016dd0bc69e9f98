// Callbacks across ranks under plrun (ddp, cpu): EarlyStopping whose ranks' own values disagree
// stops every rank after the same epoch (one rank's verdict is everyone's; without the agreement
// the other ranks would wait in a collective for it); ModelCheckpoint's top 2 on the ranks' mean
// (computed here from the scripts in callbacks_worker.cpp) and on rank 0's own value, with the
// same best_model_path on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

nlohmann::json rank_json(const TempDir& dir, int r) {
  std::ifstream in(dir / ("rank" + std::to_string(r) + ".json"));
  return nlohmann::json::parse(in);
}

std::set<std::string> checkpoint_folders(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename() != "last") out.insert(e.path().filename().string());
  return out;
}

TEST(CallbacksAcrossRanks, EarlyStoppingStopsEveryRankTogether) {
  TempDir dir;
  // a rank left alone in a collective fails within 20 s instead of hanging
  auto r = run(plrun("ddp", 3, {CALLBACKS_WORKER_PATH, "early", dir.path.string()}), {{"PL_TRAINER_TIMEOUT", "20"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int k = 0; k < 3; ++k) {
    auto j = rank_json(dir, k);
    // rank 1: best 0.9 at epoch 1, then 0.95, 0.96: 2 checks without improvement after epoch 3
    EXPECT_EQ(j["epochs"], 4) << "rank " << k;
    EXPECT_EQ(j["stopped_epoch"], 3) << "rank " << k;
    EXPECT_THAT(j["reason"].get<std::string>(), ::testing::HasSubstr(k == 1 ? "did not improve" : "another rank"))
        << "rank " << k;
  }
}

// Trainer::should_stop set by one rank inside an epoch: every rank stops after the same step, inside
// that epoch (8 steps of 40 ms each: the ranks agree about every 100 ms, so every 2 steps).
TEST(CallbacksAcrossRanks, ShouldStopOnOneRankStopsEveryRankAtTheSameStep) {
  TempDir dir;
  auto r =
      run(plrun("ddp", 2, {CALLBACKS_WORKER_PATH, "stop_rank1", dir.path.string()}), {{"PL_TRAINER_TIMEOUT", "20"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j0 = rank_json(dir, 0), j1 = rank_json(dir, 1);
  EXPECT_EQ(j0["global_step"], j1["global_step"]);
  EXPECT_EQ(j0["epochs"], j1["epochs"]);
  EXPECT_TRUE(j0["should_stop"].get<bool>());
  EXPECT_GE(j0["global_step"].get<int64_t>(), 3);
  EXPECT_LE(j0["global_step"].get<int64_t>(), 6) << "not at the epoch's end (step 8)";
  EXPECT_EQ(j0["epochs"], 0) << "stopped inside epoch 0";
}

// The expected top 2 (lowest) of the mean of two ranks' values, as folder names.
std::set<std::string> expected_top2(const std::vector<double>& values) {
  std::vector<size_t> idx(values.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::set<std::string> out;
  for (size_t i = 0; i < 2; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "epoch=%zu-val_loss=%.3f", idx[i], values[idx[i]]);
    out.insert(buf);
  }
  return out;
}

void check_topk(const std::string& mode, const std::vector<double>& monitored) {
  TempDir dir;
  auto r = run(plrun("ddp", 2, {CALLBACKS_WORKER_PATH, mode, dir.path.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j0 = rank_json(dir, 0), j1 = rank_json(dir, 1);
  const std::string best = j0["best_model_path"];
  ASSERT_FALSE(best.empty());
  EXPECT_EQ(j1["best_model_path"], best) << "every rank knows rank 0's decision";
  EXPECT_EQ(j1["best_k_models"], j0["best_k_models"]);
  const std::string folder = fs::path(best).parent_path().string();
  EXPECT_EQ(checkpoint_folders(folder), expected_top2(monitored)) << mode;
}

TEST(CallbacksAcrossRanks, ModelCheckpointKeepsTheTopKOfTheRanksMean) {
  // rank 0: 0.5 0.125 0.375 0.25 0.75; rank 1: 0.25 0.875 0.125 0.0 0.25
  check_topk("topk", {0.375, 0.5, 0.25, 0.125, 0.5});
}

TEST(CallbacksAcrossRanks, ModelCheckpointOnUnsyncedValuesFollowsRankZero) {
  check_topk("topk_local", {0.5, 0.125, 0.375, 0.25, 0.75});
}

// plrt-mlp's --early-stopping and --save-top-k under plrun: the run ends by itself with no epoch
// limit, and checkpoints/ holds k checkpoints, none better than the best (each one's trainer.json).
TEST(CallbacksAcrossRanks, PlrtMlpEarlyStoppingAndTopK) {
  TempDir dir;
  auto r = run(plrun("ddp", 2,
                     mlp_args({"--epochs", "-1", "--early-stopping", "2", "--save-top-k", "2", "--heldout", "0.2",
                               "--root-dir", dir.path.string(), "--report", dir / "report.json"})));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir / "report.json");
  auto j = nlohmann::json::parse(in);
  EXPECT_GT(j["early_stopping"]["stopped_epoch"].get<int64_t>(), 0) << r.output;
  EXPECT_EQ(j["epoch"].get<int64_t>(), j["early_stopping"]["stopped_epoch"].get<int64_t>() + 1);
  const std::string best = j["best_model_path"];
  const auto kept = checkpoint_folders(fs::path(best).parent_path().string());
  ASSERT_EQ(kept.size(), 2u) << r.output;
  EXPECT_TRUE(kept.count(fs::path(best).filename().string()));
  // every kept checkpoint's val_acc (its trainer.json) is no better than the best's, which is its own
  const fs::path folder = fs::path(best).parent_path();
  for (const auto& k : kept) {
    std::ifstream tj(folder / k / "trainer.json");
    const double acc = nlohmann::json::parse(tj)["callback_metrics"]["val_acc"].get<double>();
    EXPECT_LE(acc, j["best_model_score"].get<double>()) << k;
    if (folder / k == fs::path(best)) {
      EXPECT_EQ(acc, j["best_model_score"].get<double>());
    }
  }
}

}  // namespace

namespace {

// Trainer::predict under plrun ddp at two ranks: each rank predicts its DistributedSampler shard of
// the 10 rows (disjoint, together every row once), with the model every rank holds after fit.
TEST(CallbacksAcrossRanks, PredictAtTwoRanksCoversEveryRowOnceWithTheSameModel) {
  TempDir dir;
  auto r = run(plrun("ddp", 2, {CALLBACKS_WORKER_PATH, "predict", dir.path.string()}), {{"PL_TRAINER_TIMEOUT", "20"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j0 = rank_json(dir, 0), j1 = rank_json(dir, 1);
  std::vector<int> rows;
  for (const auto* j : {&j0, &j1}) {
    const auto mine = (*j)["rows"].get<std::vector<int>>();
    const auto predicted = (*j)["predicted"].get<std::vector<float>>();
    const auto all = j0["all"].get<std::vector<float>>();  // rank 0's model: the same on rank 1
    ASSERT_EQ(mine.size(), 5u);
    ASSERT_EQ(predicted.size(), mine.size() * 3);
    for (size_t k = 0; k < mine.size(); ++k)
      for (size_t c = 0; c < 3; ++c)
        EXPECT_NEAR(predicted[k * 3 + c], all[static_cast<size_t>(mine[k]) * 3 + c], 1e-6)
            << "row " << mine[k] << " class " << c;
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  EXPECT_EQ(j0["all"], j1["all"]) << "fit ends with one model on every rank";
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

}  // namespace
