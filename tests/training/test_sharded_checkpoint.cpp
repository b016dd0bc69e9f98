// Sharded optimizer state in checkpoints, the layout and the errors (ABI 1.5 owned_ranges), with
// the test strategy sharded_c (tests/plugins/sharded_c.c, a flat ZeRO-1 partition over a gloo
// group) under plrun, running shard_worker: every rank writes its own optimizer.rank<r>.safetensors
// (nothing is gathered) and model.safetensors keeps PyTorch names; missing and damaged shards are
// named before anything changes; sharded_c in one process (in-process Trainer) round-trips too.
// Resuming, resharding across world sizes, moving between strategies and killed saves, for
// sharded_c and ddp_sharded at both stages: test_sharded_resume.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <set>

#include "entries_model.hpp"
#include "shard_jobs.hpp"

namespace {

using ::testing::HasSubstr;
using namespace plrt_training;

TEST(ShardedCheckpoint, EveryRankWritesItsOwnShardAndTheModelKeepsPyTorchNames) {
  TempDir dir;
  Job j = job(dir, "sharded_c", 3, 1);
  ASSERT_JOB(j);
  EXPECT_EQ(files_in(j.ckpt),
            (std::set<std::string>{"model.safetensors", "optimizer.rank0.safetensors", "optimizer.rank1.safetensors",
                                   "optimizer.rank2.safetensors", "strategy.sharded_c.rank0.txt",
                                   "strategy.sharded_c.rank1.txt", "strategy.sharded_c.rank2.txt", "trainer.json"}));
  auto t = nlohmann::json::parse(std::ifstream(j.ckpt + "/trainer.json"));
  EXPECT_EQ(t.at("optimizer_files"), "per_rank");
  EXPECT_EQ(t.at("world_size"), 3);
  auto model = weights(j.ckpt + "/model.safetensors");
  EXPECT_EQ(model.size(), 5u) << "l1.weight, l1.bias, l2.weight, l2.bias and the buffer 'seen'";
  EXPECT_EQ(model.at("l2.weight"), j.weights().at("l2.weight").get<std::vector<float>>());
  // 53 trainable elements (30 + 5 + 15 + 3): chunks of 18, 18, 17; each rank's file holds its own
  int64_t elements = 0;
  for (int r = 0; r < 3; ++r) {
    auto f = pl::safetensors::load(j.ckpt + "/optimizer.rank" + std::to_string(r) + ".safetensors");
    EXPECT_EQ(f.metadata.at("shard_rank"), std::to_string(r));
    EXPECT_EQ(j.ranks[static_cast<size_t>(r)].at("stats").at("owned_elements"), r < 2 ? 18 : 17);
    for (const auto& [name, tensor] : f.tensors)
      if (name.size() > 8 && name.substr(name.size() - 8) == ".exp_avg") elements += tensor.numel();
  }
  EXPECT_EQ(elements, 53) << "the shards do not partition the state";
  auto r0 = pl::safetensors::load(j.ckpt + "/optimizer.rank0.safetensors");
  EXPECT_EQ(r0.tensors.count("state.0.0-18.exp_avg"), 1u) << "rank 0 owns l1.weight's first 18 elements";
  EXPECT_EQ(r0.tensors.size(), 2u);
  auto r1 = pl::safetensors::load(j.ckpt + "/optimizer.rank1.safetensors");
  EXPECT_EQ(r1.tensors.count("state.1.exp_avg"), 1u) << "rank 1 owns l1.bias whole";
  EXPECT_EQ(r1.metadata.count("state.1.step"), 1u);
}

TEST(ShardedCheckpoint, ShardsThatDoNotAddUpAreNamedBeforeAnythingChanges) {
  TempDir dir;
  Job j = job(dir, "sharded_c", 2, 1, "-", "sgd");  // entries_test::Model's optimizer
  ASSERT_JOB(j);
  // rank 1's shard without l1.weight's part of the momentum (elements 27..29 of 30)
  const std::string rank1 = j.ckpt + "/optimizer.rank1.safetensors";
  const std::string saved = pl::read_file(rank1);
  auto f = pl::safetensors::load(rank1);
  std::vector<std::pair<std::string, pl::Tensor>> kept;
  for (auto& [name, t] : f.tensors)
    if (name != "state.0.27-30.momentum_buffer") kept.emplace_back(name, t);
  ASSERT_EQ(kept.size() + 1, f.tensors.size());
  pl::safetensors::save(rank1, kept, f.metadata);
  TempDir a;
  Job bad = job(a, "sharded_c", 3, 2, j.ckpt, "sgd");
  EXPECT_FALSE(bad.result.ok());
  EXPECT_THAT(bad.result.output, HasSubstr("the optimizer shards do not add up: parameter 0 (l1.weight) field "
                                           "momentum_buffer has elements [27, 30) in no file (files: "
                                           "optimizer.rank0.safetensors, optimizer.rank1.safetensors)"));
  // a missing shard, in one process (nothing may change before the error)
  pl::write_file_atomic(rank1, saved);
  fs::remove(rank1);
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR};
  ro.log_level = "warn";
  pl::TrainerOptions o;
  o.strategy = "single_device";
  o.accelerator = "cpu";
  o.default_root_dir = dir.path.string();
  o.enable_progress_bar = false;
  o.read_env = false;
  o.max_epochs = 2;
  o.seed = 5;
  pl::Trainer trainer(o, ro);
  entries_test::Model model;
  std::vector<float> before = model.l1().weight().value.to_vector<float>();
  auto data = entries_test::loader(36, 6);
  std::string msg;
  try {
    trainer.fit(model, data, nullptr, j.ckpt);
  } catch (const pl::Error& e) {
    msg = e.what();
  }
  EXPECT_THAT(msg, HasSubstr("checkpoint " + j.ckpt +
                             " lacks optimizer.rank1.safetensors (trainer.json says each "
                             "of its 2 ranks wrote its optimizer state"));
  EXPECT_EQ(trainer.global_step(), 0);
  EXPECT_EQ(model.l1().weight().value.to_vector<float>(), before) << "the weights were loaded before the error";
}

TEST(ShardedCheckpoint, OneProcessShardsTooAndBadOptionsAreNamed) {
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR};
  ro.log_level = "warn";
  TempDir dir;
  auto fit = [&](int64_t epochs, const std::string& resume,
                 std::vector<std::pair<std::string, std::string>> opts = {}) {
    pl::TrainerOptions o;
    o.strategy = "sharded_c";
    o.strategy_options = std::move(opts);
    o.accelerator = "cpu";
    o.default_root_dir = dir.path.string();
    o.enable_progress_bar = false;
    o.read_env = false;
    o.max_epochs = epochs;
    o.seed = 5;
    pl::Trainer trainer(o, ro);
    entries_test::Model model;
    auto data = entries_test::loader(36, 6);
    trainer.fit(model, data, nullptr, resume);
    return std::make_pair(model.l2().weight().value.to_vector<float>(), trainer.log_dir() + "/checkpoints/last");
  };
  auto straight = fit(3, "");
  auto first = fit(1, "");
  EXPECT_TRUE(fs::exists(first.second + "/optimizer.rank0.safetensors"));
  EXPECT_FALSE(fs::exists(first.second + "/optimizer.safetensors"));
  EXPECT_EQ(fit(3, first.second).first, straight.first);
  std::string msg;
  try {
    fit(1, "", {{"kill_save_rank", "one"}});
  } catch (const pl::Error& e) {
    msg = e.what();
  }
  EXPECT_THAT(msg, HasSubstr("sharded_c: kill_save_rank='one' is not valid (an integer >= 0)"));
}

}  // namespace
