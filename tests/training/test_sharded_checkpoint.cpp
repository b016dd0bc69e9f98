// Sharded optimizer state in checkpoints, end to end (ABI 1.5 owned_ranges): the test strategy
// sharded_c (tests/plugins/sharded_c.c, a flat ZeRO-1 partition over a gloo group) under plrun,
// running shard_worker.  Every rank writes its own optimizer.rank<r>.safetensors (nothing is
// gathered) and model.safetensors keeps PyTorch names; a run resumed at the same world size equals
// an uninterrupted one; the state reshards 2 -> 3 -> 2 and moves between ddp / single_device and
// sharded_c both ways, each time equal to the uninterrupted run (every rank sees the whole
// dataset, so the trajectory does not depend on the world size); a worker killed in the middle of
// a save leaves the previous checkpoint whole; missing and damaged shards are named before anything
// changes; sharded_c in one process (in-process Trainer) round-trips too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <set>

#include "entries_model.hpp"
#include "training_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace plrt_training;

// One job of shard_worker: its result, every rank's report, rank 0's checkpoint folder.
struct Job {
  plrt_test::ProcessResult result;
  std::vector<nlohmann::json> ranks;
  std::string ckpt;
  const nlohmann::json& weights() const { return ranks.at(0).at("weights"); }
};

Job job(const TempDir& dir, const std::string& strategy, int devices, int64_t epochs, const std::string& resume = "-",
        const std::string& optimizer = "adam", bool kill = false) {
  std::vector<std::string> a{PLRUN_PATH,
                             "--accelerator",
                             "cpu",
                             "--strategy",
                             strategy,
                             "--devices",
                             std::to_string(devices),
                             "--plugin-path",
                             PLRT_TEST_PLUGIN_DIR,
                             "--",
                             SHARD_WORKER_PATH,
                             dir / "out",
                             dir.path.string(),
                             strategy,
                             std::to_string(epochs),
                             optimizer,
                             resume};
  if (kill) a.push_back("kill");
  Job j;
  j.result = run(a);
  for (int r = 0; r < devices; ++r) {
    std::ifstream in(dir / ("out.rank" + std::to_string(r)));
    j.ranks.push_back(in ? nlohmann::json::parse(in) : nlohmann::json::object());
  }
  if (j.ranks[0].contains("log_dir")) j.ckpt = j.ranks[0]["log_dir"].get<std::string>() + "/checkpoints/last";
  return j;
}

#define ASSERT_JOB(j) ASSERT_TRUE((j).result.ok()) << (j).result.status() << "\n" << (j).result.output

// The largest |a - b| over every weight.
double max_difference(const nlohmann::json& a, const nlohmann::json& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (auto& [name, values] : b.items()) {
    if (!a.contains(name)) {
      ADD_FAILURE() << "no " << name;
      continue;
    }
    const auto x = a.at(name).get<std::vector<float>>(), y = values.get<std::vector<float>>();
    EXPECT_EQ(x.size(), y.size()) << name;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k)
      worst = std::max(worst, std::abs(static_cast<double>(x[k]) - y[k]));
  }
  return worst;
}

std::set<std::string> files_in(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.insert(e.path().filename().string());
  return out;
}

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

TEST(ShardedCheckpoint, AResumedRunEqualsAnUninterruptedOne) {
  TempDir straight_dir, first_dir, resumed_dir;
  Job straight = job(straight_dir, "sharded_c", 2, 3);
  ASSERT_JOB(straight);
  Job first = job(first_dir, "sharded_c", 2, 1);
  ASSERT_JOB(first);
  Job resumed = job(resumed_dir, "sharded_c", 2, 3, first.ckpt);
  ASSERT_JOB(resumed);
  EXPECT_EQ(resumed.ranks[0].at("global_step"), 18);
  EXPECT_EQ(resumed.ranks[1].at("stats").at("restored"), 1);
  EXPECT_LE(max_difference(resumed.weights(), straight.weights()), 1e-6);
  EXPECT_EQ(resumed.weights(), resumed.ranks[1].at("weights")) << "the ranks disagree";
}

TEST(ShardedCheckpoint, ResumesAcrossWorldSizes2To3To2) {
  TempDir straight_dir, straight3_dir, a, b, c;
  Job straight = job(straight_dir, "sharded_c", 2, 3);
  ASSERT_JOB(straight);
  Job two = job(a, "sharded_c", 2, 1);
  ASSERT_JOB(two);
  Job three = job(b, "sharded_c", 3, 2, two.ckpt);
  ASSERT_JOB(three);
  EXPECT_TRUE(fs::exists(three.ckpt + "/optimizer.rank2.safetensors"));
  Job back = job(c, "sharded_c", 2, 3, three.ckpt);
  ASSERT_JOB(back);
  EXPECT_EQ(back.ranks[0].at("global_step"), 18);
  // the same trajectory at every world size (the average of equal gradients), so the resharded
  // state must continue it; float rounding of the average at 3 ranks is the only difference
  EXPECT_LE(max_difference(back.weights(), straight.weights()), 1e-6);
  Job straight3 = job(straight3_dir, "sharded_c", 3, 2);
  ASSERT_JOB(straight3);
  EXPECT_LE(max_difference(three.weights(), straight3.weights()), 1e-6);
}

TEST(ShardedCheckpoint, DdpAndSingleDeviceCheckpointsLoadIntoShardsAndBack) {
  for (const std::string optimizer : {"adam", "sgd"}) {
    TempDir straight_dir, a, b, c;
    Job straight = job(straight_dir, "ddp", 2, 3, "-", optimizer);
    ASSERT_JOB(straight);
    Job ddp = job(a, "ddp", 2, 1, "-", optimizer);
    ASSERT_JOB(ddp);
    EXPECT_TRUE(fs::exists(ddp.ckpt + "/optimizer.safetensors"));
    Job sharded = job(b, "sharded_c", 3, 2, ddp.ckpt, optimizer);  // ddp at 2 -> sharded at 3
    ASSERT_JOB(sharded);
    Job single = job(c, "single_device", 1, 3, sharded.ckpt, optimizer);  // sharded at 3 -> one process
    ASSERT_JOB(single);
    EXPECT_LE(max_difference(single.weights(), straight.weights()), 1e-6) << optimizer;
    TempDir d;
    Job ddp_again = job(d, "ddp", 2, 3, sharded.ckpt, optimizer);  // sharded -> ddp
    ASSERT_JOB(ddp_again);
    EXPECT_LE(max_difference(ddp_again.weights(), straight.weights()), 1e-6) << optimizer;
  }
}

TEST(ShardedCheckpoint, AWorkerKilledDuringASaveLeavesThePreviousCheckpointWhole) {
  TempDir dir;
  Job j = job(dir, "sharded_c", 2, 2, "-", "adam", true);
  EXPECT_FALSE(j.result.ok()) << j.result.output;
  const std::string ckpt = dir / "lightning_logs/version_0/checkpoints/last";
  auto t = nlohmann::json::parse(std::ifstream(ckpt + "/trainer.json"));
  EXPECT_EQ(t.at("global_step"), 6) << "the first epoch's checkpoint was replaced";
  EXPECT_EQ(files_in(ckpt),
            (std::set<std::string>{"model.safetensors", "optimizer.rank0.safetensors", "optimizer.rank1.safetensors",
                                   "strategy.sharded_c.rank0.txt", "strategy.sharded_c.rank1.txt", "trainer.json"}));
  // The staging folder rank 0 made (when plrun's SIGTERM came before rank 0 removed it) shows the
  // kill came in the middle of the save: rank 1's shard was written, nothing was committed.
  for (const auto& e : fs::directory_iterator(fs::path(ckpt).parent_path())) {
    const std::string name = e.path().filename().string();
    if (name == "last") continue;
    EXPECT_EQ(name.rfind("last.tmp-", 0), 0u) << name;
    EXPECT_TRUE(fs::exists(e.path() / "optimizer.rank1.safetensors")) << name;
    EXPECT_FALSE(fs::exists(e.path() / "trainer.json")) << name;
  }
  // and it resumes: to the end of the second epoch, equal to a run that was never killed
  TempDir again, straight_dir;
  Job resumed = job(again, "sharded_c", 2, 2, ckpt);
  ASSERT_JOB(resumed);
  Job straight = job(straight_dir, "sharded_c", 2, 2);
  ASSERT_JOB(straight);
  EXPECT_LE(max_difference(resumed.weights(), straight.weights()), 1e-6);
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
  o.enable_progress = false;
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
    o.enable_progress = false;
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
