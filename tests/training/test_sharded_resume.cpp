// Resuming from sharded checkpoints, end to end under plrun (shard_worker), for every sharding
// strategy: the test strategy sharded_c (tests/plugins/sharded_c.c) and ddp_sharded at ZeRO stage
// 1 and 2.  Every rank sees the whole dataset, so the trajectory does not depend on the world
// size or the strategy, and every comparison is with an uninterrupted run (1e-6):
//  - each rank writes only its own shard of the optimizer state;
//  - a run resumed at the same world size equals an uninterrupted one;
//  - the state reshards 2 -> 3 -> 2 on load;
//  - it moves from ddp and single_device into shards and back;
//  - a worker killed in the middle of a save (rank 1 before its shard is written, rank 0 after
//    every rank wrote its shard and before the commit; sharded_c also inside its save_state)
//    leaves the previous checkpoint whole, and the run resumes from it;
//  - ddp_sharded_spawn (in this process) resumes too.
// Each resumed run reports how many steps it ran itself, so that a resume that ignored the
// checkpoint (and trained from the start) cannot pass.
#include <gtest/gtest.h>

#include <plrt/sdk/safetensors.hpp>

#include "entries_model.hpp"
#include "shard_jobs.hpp"

namespace {

using namespace plrt_training;

constexpr int kStepsPerEpoch = 6;  // shard_worker: 36 samples, batches of 6

class ShardedCheckpointResume : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& strategy() const { return GetParam(); }
  bool sharded_c() const { return strategy() == "sharded_c"; }
};

// The files of a complete checkpoint saved by `world` ranks of `strategy`.
std::set<std::string> complete(const std::string& strategy, int world) {
  std::set<std::string> out{"model.safetensors", "trainer.json"};
  for (int r = 0; r < world; ++r) {
    out.insert("optimizer.rank" + std::to_string(r) + ".safetensors");
    if (strategy == "sharded_c") out.insert("strategy.sharded_c.rank" + std::to_string(r) + ".txt");
  }
  return out;
}

TEST_P(ShardedCheckpointResume, EveryRankWritesOnlyItsOwnShard) {
  TempDir dir;
  Job j = job(dir, strategy(), 3, 1);
  ASSERT_JOB(j);
  EXPECT_EQ(files_in(j.ckpt), complete(strategy(), 3));
  auto t = nlohmann::json::parse(std::ifstream(j.ckpt + "/trainer.json"));
  EXPECT_EQ(t.at("optimizer_files"), "per_rank");
  EXPECT_EQ(t.at("world_size"), 3);
  // 53 trainable elements: the three files partition them, each holding its rank's own elements
  int64_t total = 0;
  for (int r = 0; r < 3; ++r) {
    auto f = pl::safetensors::load(j.ckpt + "/optimizer.rank" + std::to_string(r) + ".safetensors");
    EXPECT_EQ(f.metadata.at("shard_rank"), std::to_string(r));
    int64_t elements = 0;
    for (const auto& [name, tensor] : f.tensors)
      if (name.size() > 8 && name.substr(name.size() - 8) == ".exp_avg") elements += tensor.numel();
    const auto& stats = j.ranks[static_cast<size_t>(r)].at("stats");
    const double owned = sharded_c() ? stats.at("owned_elements").get<double>()
                                     : stats.at("owned_param_bytes").get<double>() / sizeof(float);
    EXPECT_EQ(elements, owned) << "rank " << r;
    if (!sharded_c()) {  // plrun passed the option on
      EXPECT_EQ(stats.at("stage"), strategy().back() - '0') << strategy();
    }
    EXPECT_LE(elements, 18) << "rank " << r << " holds more than its third";
    total += elements;
  }
  EXPECT_EQ(total, 53) << "the shards do not partition the state";
}

TEST_P(ShardedCheckpointResume, AResumedRunEqualsAnUninterruptedOne) {
  TempDir straight_dir, first_dir, resumed_dir;
  Job straight = job(straight_dir, strategy(), 2, 3);
  ASSERT_JOB(straight);
  Job first = job(first_dir, strategy(), 2, 1);
  ASSERT_JOB(first);
  EXPECT_GT(max_difference(first.weights(), straight.weights()), 1e-3) << "the comparison below is vacuous";
  Job resumed = job(resumed_dir, strategy(), 2, 3, first.ckpt);
  ASSERT_JOB(resumed);
  EXPECT_EQ(resumed.ranks[0].at("global_step"), 3 * kStepsPerEpoch);
  EXPECT_EQ(resumed.ranks[0].at("steps_run"), 2 * kStepsPerEpoch) << "it did not start at the checkpoint";
  if (sharded_c()) {
    EXPECT_EQ(resumed.ranks[1].at("stats").at("restored"), 1);
  }
  EXPECT_LE(max_difference(resumed.weights(), straight.weights()), 1e-6);
  EXPECT_EQ(resumed.weights(), resumed.ranks[1].at("weights")) << "the ranks disagree";
}

TEST_P(ShardedCheckpointResume, ResumesAcrossWorldSizes2To3To2) {
  TempDir straight_dir, straight3_dir, a, b, c;
  Job straight = job(straight_dir, strategy(), 2, 3);
  ASSERT_JOB(straight);
  Job two = job(a, strategy(), 2, 1);
  ASSERT_JOB(two);
  Job three = job(b, strategy(), 3, 2, two.ckpt);
  ASSERT_JOB(three);
  EXPECT_EQ(three.ranks[2].at("steps_run"), kStepsPerEpoch);
  EXPECT_EQ(files_in(three.ckpt), complete(strategy(), 3));
  Job back = job(c, strategy(), 2, 3, three.ckpt);
  ASSERT_JOB(back);
  EXPECT_EQ(back.ranks[0].at("global_step"), 3 * kStepsPerEpoch);
  EXPECT_EQ(back.ranks[0].at("steps_run"), kStepsPerEpoch);
  // the same trajectory at every world size (the average of equal gradients), so the resharded
  // state must continue it; float rounding of the average at 3 ranks is the only difference
  EXPECT_LE(max_difference(back.weights(), straight.weights()), 1e-6);
  Job straight3 = job(straight3_dir, strategy(), 3, 2);
  ASSERT_JOB(straight3);
  EXPECT_LE(max_difference(three.weights(), straight3.weights()), 1e-6);
}

TEST_P(ShardedCheckpointResume, DdpAndSingleDeviceCheckpointsLoadIntoShardsAndBack) {
  for (const std::string optimizer : {"adam", "sgd"}) {
    SCOPED_TRACE(optimizer);
    TempDir straight_dir, a, b, c, d, e, f;
    Job straight = job(straight_dir, "ddp", 2, 3, "-", optimizer);
    ASSERT_JOB(straight);
    Job ddp = job(a, "ddp", 2, 1, "-", optimizer);
    ASSERT_JOB(ddp);
    EXPECT_TRUE(fs::exists(ddp.ckpt + "/optimizer.safetensors"));
    Job sharded = job(b, strategy(), 3, 2, ddp.ckpt, optimizer);  // ddp at 2 -> sharded at 3
    ASSERT_JOB(sharded);
    EXPECT_EQ(sharded.ranks[0].at("steps_run"), kStepsPerEpoch);
    Job single = job(c, "single_device", 1, 3, sharded.ckpt, optimizer);  // sharded at 3 -> one process
    ASSERT_JOB(single);
    EXPECT_EQ(single.ranks[0].at("steps_run"), kStepsPerEpoch);
    EXPECT_LE(max_difference(single.weights(), straight.weights()), 1e-6);
    Job ddp_again = job(d, "ddp", 2, 3, sharded.ckpt, optimizer);  // sharded -> ddp
    ASSERT_JOB(ddp_again);
    EXPECT_EQ(ddp_again.ranks[0].at("steps_run"), kStepsPerEpoch);
    EXPECT_LE(max_difference(ddp_again.weights(), straight.weights()), 1e-6);
    Job one = job(e, "single_device", 1, 1, "-", optimizer);
    ASSERT_JOB(one);
    Job from_one = job(f, strategy(), 2, 3, one.ckpt, optimizer);  // single_device -> sharded at 2
    ASSERT_JOB(from_one);
    EXPECT_EQ(from_one.ranks[1].at("steps_run"), 2 * kStepsPerEpoch);
    EXPECT_LE(max_difference(from_one.weights(), straight.weights()), 1e-6);
  }
}

// Two epochs at 2 ranks with shard_worker's kill mode `kill` (the second epoch's save is
// interrupted): the job fails; checkpoints/last is still the first epoch's, whole; a staging
// folder left behind holds no trainer.json (nothing was committed), and what it holds shows where
// the kill came; a run resumed from `last` equals one that was never killed.
void killed_save_keeps_the_previous_checkpoint(const std::string& strategy, const std::string& kill) {
  TempDir dir;
  Job j = job(dir, strategy, 2, 2, "-", "adam", kill);
  EXPECT_FALSE(j.result.ok()) << j.result.output;
  const std::string ckpt = dir / "lightning_logs/version_0/checkpoints/last";
  auto t = nlohmann::json::parse(std::ifstream(ckpt + "/trainer.json"));
  EXPECT_EQ(t.at("global_step"), kStepsPerEpoch) << "the first epoch's checkpoint was replaced";
  EXPECT_EQ(files_in(ckpt), complete(strategy, 2));
  EXPECT_EQ(weights(ckpt + "/model.safetensors").size(), 5u);
  // Where the worker died (the hook modes write it): inside the save, the staging folder made.
  std::string staging;
  if (kill != "kill") {
    std::ifstream in(dir / "out.killed");
    ASSERT_TRUE(in) << "the worker was not killed where asked: " << j.result.output;
    const auto at = nlohmann::json::parse(in);
    EXPECT_EQ(at.at("steps_run"), 2 * kStepsPerEpoch);
    staging = at.at("staging").get<std::string>();
    EXPECT_EQ(staging.rfind(ckpt + ".tmp-", 0), 0u) << "no save was under way: '" << staging << "'";
    const auto files = at.at("files").get<std::set<std::string>>();
    EXPECT_EQ(files.count("trainer.json"), 0u);
    if (kill == "kill-rank1") {  // rank 1 died before writing its shard
      EXPECT_EQ(at.at("rank"), 1);
      EXPECT_EQ(files.count("optimizer.rank1.safetensors"), 0u);
    } else {  // rank 0 died after every rank reported, before writing the model and committing
      EXPECT_EQ(at.at("rank"), 0);
      EXPECT_EQ(files.count("optimizer.rank0.safetensors"), 1u);
      EXPECT_EQ(files.count("optimizer.rank1.safetensors"), 1u);
      EXPECT_EQ(files.count("model.safetensors"), 0u);
    }
  }
  // Staging folders left behind (rank 0 killed, or SIGTERMed by plrun before it removed its own).
  int left = 0;
  for (const auto& e : fs::directory_iterator(fs::path(ckpt).parent_path())) {
    const std::string name = e.path().filename().string();
    if (name == "last") continue;
    ++left;
    EXPECT_EQ(name.rfind("last.tmp-", 0), 0u) << name;
    EXPECT_FALSE(fs::exists(e.path() / "trainer.json")) << name;
    EXPECT_EQ(fs::exists(e.path() / "optimizer.rank1.safetensors"), kill != "kill-rank1") << name;
  }
  if (kill == "kill-rank0") {
    EXPECT_EQ(left, 1) << "a killed rank 0 cannot remove its staging folder";
    EXPECT_TRUE(fs::exists(staging)) << staging;
  }
  // and it resumes: to the end of the second epoch, equal to a run that was never killed
  TempDir again, straight_dir;
  Job resumed = job(again, strategy, 2, 2, ckpt);
  ASSERT_JOB(resumed);
  EXPECT_EQ(resumed.ranks[0].at("steps_run"), kStepsPerEpoch);
  Job straight = job(straight_dir, strategy, 2, 2);
  ASSERT_JOB(straight);
  EXPECT_LE(max_difference(resumed.weights(), straight.weights()), 1e-6);
}

TEST_P(ShardedCheckpointResume, Rank1KilledBeforeWritingItsShardLeavesThePreviousCheckpointWhole) {
  killed_save_keeps_the_previous_checkpoint(strategy(), "kill-rank1");
}

TEST_P(ShardedCheckpointResume, Rank0KilledBeforeTheCommitLeavesThePreviousCheckpointWhole) {
  killed_save_keeps_the_previous_checkpoint(strategy(), "kill-rank0");
}

// sharded_c's test option kills rank 1 inside the strategy's save_state, after its shard.
TEST(ShardedCheckpoint, AWorkerKilledDuringASaveLeavesThePreviousCheckpointWhole) {
  killed_save_keeps_the_previous_checkpoint("sharded_c", "kill");
}

// ddp_sharded_spawn (fit forks the ranks in this process): a run resumed from its checkpoint with
// another seed (so that a resume that ignored the checkpoint starts from other weights) ends where
// the uninterrupted run ends.
TEST(ShardedCheckpoint, DdpShardedSpawnResumesToo) {
  class Model : public entries_test::Model {
    std::unique_ptr<pl::Optimizer> configure_optimizers() override {
      return std::make_unique<pl::Adam>(parameters(), pl::AdamOptions{0.02, 0.9, 0.99, 1e-8, 0.01});
    }
  };
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR};
  ro.log_level = "warn";
  TempDir dir;
  auto fit = [&](int64_t epochs, uint64_t seed, const std::string& resume) {
    pl::TrainerOptions o;
    o.strategy = "ddp_sharded_spawn";
    o.strategy_options = {{"stage", "2"}};
    o.devices = pl::Devices::from_text("2");
    o.accelerator = "cpu";
    o.default_root_dir = dir.path.string();
    o.enable_progress_bar = false;
    o.read_env = false;
    o.use_distributed_sampler = false;
    o.max_epochs = epochs;
    o.seed = seed;
    pl::Trainer trainer(o, ro);
    Model model;
    auto data = entries_test::loader(36, 6);
    trainer.fit(model, data, nullptr, resume);
    EXPECT_EQ(trainer.global_step(), epochs * kStepsPerEpoch);
    nlohmann::json w;
    for (auto& [name, p] : model.named_parameters()) w[name] = p->value.to_vector<float>();
    return std::make_pair(w, trainer.log_dir() + "/checkpoints/last");
  };
  auto straight = fit(3, 5, "");
  auto first = fit(1, 5, "");
  EXPECT_TRUE(fs::exists(first.second + "/optimizer.rank1.safetensors")) << first.second;
  EXPECT_GT(max_difference(fit(3, 6, "").first, straight.first), 1e-3) << "the seed does not matter";
  EXPECT_LE(max_difference(fit(3, 6, first.second).first, straight.first), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Strategies, ShardedCheckpointResume,
                         ::testing::Values("sharded_c", "ddp_sharded:stage=1", "ddp_sharded:stage=2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
