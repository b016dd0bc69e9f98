// decentralized and low_precision_decentralized (docs/bagua.md §3, §4) end to end through the
// programs a user runs (plrun launching plrt-mlp at 2 ranks):
//  - both train the sample to within half a point of gradient_allreduce's held-out accuracy (the
//    mean over four seeds: one held-out sample is a sixth of a point, so one seed alone is noise);
//  - shift_one at two ranks is the average over both ranks, bit for bit;
//  - a run resumed from a checkpoint (each rank's state file and each rank's own optimizer state,
//    ABI 1.6 local_optimizer_state, put back) equals an uninterrupted one, bit for bit, with SGD
//    momentum (whose buffers differ per rank);
//  - shift_one on an odd world size exits 2 naming it.
#include <fstream>
#include <iterator>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

struct Mlp {
  int samples = 4800, epochs = 3, seed = 7;
  std::vector<std::string> extra;  // plrt-mlp options
};

// plrun --strategy `strategy` --devices `world` [strategy options] -- plrt-mlp ...
std::vector<std::string> command(const std::string& strategy, int world, const std::vector<std::string>& sopts,
                                 const Mlp& m) {
  std::vector<std::string> a{PLRUN_PATH,  "--accelerator",      "cpu", "--strategy", strategy,
                             "--devices", std::to_string(world)};
  for (const auto& o : sopts) a.insert(a.end(), {"--strategy-option", o});
  a.insert(a.end(), {"--", MLP_PATH, "--features", "24", "--hidden", "16,12", "--classes", "5", "--samples",
                     std::to_string(m.samples), "--no-shuffle", "--seed", std::to_string(m.seed), "--lr", "0.05",
                     "--batch-size", "16", "--epochs", std::to_string(m.epochs)});
  a.insert(a.end(), m.extra.begin(), m.extra.end());
  return a;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(BaguaDecentralized, HeldOutAccuracyWithinHalfAPointOfGradientAllreduce) {
  TempDir dir;
  auto mean_val_acc = [&](const std::string& strategy) {
    double sum = 0;
    for (int seed = 1; seed <= 4; ++seed) {
      const std::string tag = strategy + std::to_string(seed);
      Mlp m;
      m.seed = seed;
      m.extra = {"--root-dir", dir / tag, "--no-checkpoint", "--report", dir / (tag + ".json")};
      auto r = run(command(strategy, 2, {}, m));
      EXPECT_RAN(r);
      sum += report(dir / (tag + ".json"))["metrics"].value("val_acc", 0.0);
    }
    return sum / 4;
  };
  const double allreduce = mean_val_acc("bagua");
  EXPECT_GE(allreduce, 0.95) << "the reference did not converge";
  for (const char* s : {"bagua_decentralized", "bagua_low_precision_decentralized"}) {
    const double acc = mean_val_acc(s);
    EXPECT_NEAR(acc, allreduce, 0.005) << s << ": held-out accuracy " << acc << ", gradient_allreduce " << allreduce;
  }
}

TEST(BaguaDecentralized, ShiftOneAtTwoRanksIsTheAverageOverBoth) {
  TempDir dir;
  auto weights_of = [&](const std::string& tag, const std::vector<std::string>& sopts) {
    Mlp m;
    m.epochs = 1;
    m.extra = {"--root-dir", dir / tag, "--no-checkpoint", "--save", dir / (tag + ".safetensors")};
    auto r = run(command("bagua_decentralized", 2, sopts, m));
    EXPECT_RAN(r);
    return file_bytes(dir / (tag + ".safetensors"));
  };
  const std::string all = weights_of("all", {}), shift_one = weights_of("shift_one", {"peer_selection_mode=shift_one"});
  EXPECT_FALSE(all.empty());
  EXPECT_EQ(all, shift_one);
}

// 4 epochs straight, or 2 epochs then a resume from their checkpoint for 2 more: the same weights.
TEST(BaguaDecentralized, AResumedRunEqualsAnUninterruptedOne) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"bagua_low_precision_decentralized", {"communication_interval=3"}},
      {"bagua_decentralized", {"peer_selection_mode=shift_one", "communication_interval=3"}}};
  for (const auto& [strategy, sopts] : cases) {
    TempDir dir;
    const std::vector<std::string> sgd{"--optimizer", "sgd", "--momentum", "0.9"};
    auto job = [&](const std::string& tag, int epochs, std::vector<std::string> extra) {
      Mlp m;
      m.samples = 2400;
      m.epochs = epochs;
      m.extra = sgd;
      extra.insert(extra.end(), {"--root-dir", dir / tag, "--save", dir / (tag + ".safetensors")});
      m.extra.insert(m.extra.end(), extra.begin(), extra.end());
      auto r = run(command(strategy, 2, sopts, m));
      EXPECT_RAN(r);
      return file_bytes(dir / (tag + ".safetensors"));
    };
    const std::string straight = job("straight", 4, {"--no-checkpoint"});
    const std::string half = job("first", 2, {});
    const std::string ckpt = dir / "first/lightning_logs/version_0/checkpoints/last";
    ASSERT_TRUE(fs::exists(ckpt + "/strategy.bagua.rank1.bin")) << strategy;
    ASSERT_TRUE(fs::exists(ckpt + "/optimizer.rank1.safetensors")) << strategy << ": rank 1's own optimizer state";
    const std::string resumed = job("resumed", 4, {"--no-checkpoint", "--resume", ckpt});
    EXPECT_FALSE(straight.empty());
    EXPECT_NE(half, straight) << "the comparison below is vacuous";
    EXPECT_EQ(resumed, straight) << strategy;
  }
}

TEST(BaguaDecentralized, ShiftOneOnThreeRanksExitsTwo) {
  TempDir dir;
  Mlp m;
  m.extra = {"--max-steps", "1", "--root-dir", dir / "bad"};
  auto r = run(command("bagua_decentralized", 3, {"peer_selection_mode=shift_one"}, m));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shift_one needs an even world size, and the job has 3 processes"), std::string::npos)
      << r.output;
}

}  // namespace
