// ddp_sharded end to end through the programs a user runs (plrun launching plrt-mlp): ZeRO's
// sharded optimizer state and gradients must not change the numbers, only where they live.
//  - at 2, 3 and 4 ranks, stage 1 and 2 (and stage 2 with a bucket per parameter): the weights
//    equal ddp's and one process's on the union batch (1e-5), for SGD with momentum, Nesterov and
//    weight decay, Adam and AdamW
//  - gradient accumulation, 16-mixed and bf16-mixed, ddp_sharded_spawn
//  - memory: this rank's optimizer state is ddp's / W (within 1 %), stage 2's gradient shard is
//    the trainable bytes / W and its bucket memory two buckets
#include <algorithm>
#include <fstream>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

constexpr int kSteps = 40;

// Trains with `strategy` at `world` ranks (single_device for world 0: one process on the union
// batch of `world_of_union` ranks) and returns the saved weights' path.
std::string train(const TempDir& dir, const std::string& tag, const std::string& strategy, int world, int per_rank,
                  std::vector<std::string> extra) {
  const std::string out = dir / (tag + ".safetensors");
  std::vector<std::string> args{"--batch-size", std::to_string(per_rank), "--epochs", "100", "--root-dir",
                                dir / tag,      "--no-checkpoint",        "--save",   out};
  if (std::find(extra.begin(), extra.end(), "--max-steps") == extra.end())
    args.insert(args.end(), {"--max-steps", std::to_string(kSteps)});
  args.insert(args.end(), extra.begin(), extra.end());
  plrt_test::ProcessResult r;
  if (world == 0) {
    args.insert(args.end(), {"--strategy", "single_device", "--devices", "1"});
    r = run(mlp_args(args));
  } else {
    r = run(plrun(strategy, world, mlp_args(args)));
  }
  EXPECT_RAN(r);
  return out;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Bucket caps of one byte: a bucket per parameter.
const std::vector<std::string> one_byte{"--strategy-option", "bucket_cap_mb=0.000001", "--strategy-option",
                                        "first_bucket_cap_mb=0.000001"};

void sharded_matches(int world, const std::vector<std::string>& optimizer) {
  TempDir dir;
  const int per_rank = 8;
  const std::string single = train(dir, "single", "", 0, per_rank * world, optimizer);
  const std::string ddp = train(dir, "ddp", "ddp", world, per_rank, optimizer);
  EXPECT_LE(relative_difference(ddp, single), 1e-5);
  // "2 per-parameter": a bucket per parameter (caps of one byte), so every bucket is reduce-scattered
  // and gathered in place in its parameter, and the 5-element bias leaves rank 3 of 4 nothing.
  for (const char* stage : {"1", "2", "2 per-parameter"}) {
    std::vector<std::string> extra = with(optimizer, {"--strategy-option", std::string("stage=") + stage[0]});
    if (std::string(stage).size() > 1) extra = with(extra, one_byte);
    const std::string sh =
        train(dir, std::string("stage") + stage[0] + (stage[1] ? "p" : ""), "ddp_sharded", world, per_rank, extra);
    EXPECT_LE(relative_difference(sh, ddp), 1e-5) << "stage " << stage << " vs ddp at " << world << " ranks";
    EXPECT_LE(relative_difference(sh, single), 1e-5) << "stage " << stage << " vs the union batch";
  }
  // The runs moved the weights: the comparisons are not vacuous.
  const std::string init = train(dir, "init", "", 0, per_rank, {"--max-steps", "0"});
  EXPECT_GT(relative_difference(init, single), 1e-2);
}

TEST(Sharded, TwoRanksSgdMomentumNesterovWeightDecayEqualsDdpAndUnion) {
  sharded_matches(2, {"--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--weight-decay", "0.01"});
}
TEST(Sharded, ThreeRanksAdamEqualsDdpAndUnion) { sharded_matches(3, {"--optimizer", "adam"}); }
TEST(Sharded, FourRanksAdamWEqualsDdpAndUnion) { sharded_matches(4, {"--optimizer", "adamw"}); }

TEST(Sharded, GradientAccumulationEqualsLargerBatch) {
  TempDir dir;
  const std::string big = train(dir, "big", "", 0, 24, {"--optimizer", "adam"});
  for (const char* stage : {"1", "2"}) {
    const std::string acc = train(
        dir, std::string("acc") + stage, "ddp_sharded", 2, 4,
        {"--optimizer", "adam", "--accumulate-grad-batches", "3", "--strategy-option", std::string("stage=") + stage});
    EXPECT_LE(relative_difference(acc, big), 1e-5) << "stage " << stage;
  }
}

TEST(Sharded, MixedPrecisionEqualsDdp) {
  for (const char* precision : {"16-mixed", "bf16-mixed"}) {
    TempDir dir;
    const std::vector<std::string> o{"--optimizer", "adam", "--precision", precision};
    const std::string ddp = train(dir, "ddp", "ddp", 2, 8, o);
    for (const char* stage : {"1", "2"}) {
      const std::string sh = train(dir, std::string("sh") + stage, "ddp_sharded", 2, 8,
                                   with(o, {"--strategy-option", std::string("stage=") + stage}));
      EXPECT_LE(relative_difference(sh, ddp), 1e-5) << precision << " stage " << stage;
    }
  }
}

TEST(Sharded, SpawnParentHoldsTheTrainedWeights) {
  TempDir dir;
  const std::string single = train(dir, "single", "", 0, 16, {"--optimizer", "adam"});
  const std::string out = dir / "spawn.safetensors";
  auto r = run(mlp_args({"--strategy", "ddp_sharded_spawn", "--accelerator", "cpu", "--devices", "2", "--batch-size",
                         "8", "--max-steps", std::to_string(kSteps), "--epochs", "100", "--optimizer", "adam",
                         "--root-dir", dir / "spawn", "--no-checkpoint", "--save", out}));
  EXPECT_RAN(r);
  EXPECT_LE(relative_difference(out, single), 1e-5);
}

// Clipping by norm must use the norm over every shard (fairscale's OSS at fp32 clipped by each
// rank's own): the weights equal one process's with the same clipping.  Clipping changes the run.
void clipped_matches(int world, const std::string& clip, const std::string& algorithm, const char* precision) {
  TempDir dir;
  const std::vector<std::string> c{"--gradient-clip-val", clip,     "--gradient-clip-algorithm", algorithm,
                                   "--precision",         precision};
  const std::string single = train(dir, "single", "", 0, 8 * world, c);
  const std::string ddp = train(dir, "ddp", "ddp", world, 8, c);
  for (const char* stage : {"1", "2"}) {
    const std::string sh = train(dir, std::string("sh") + stage, "ddp_sharded", world, 8,
                                 with(c, {"--strategy-option", std::string("stage=") + stage}));
    EXPECT_LE(relative_difference(sh, ddp), 1e-5) << algorithm << " " << clip << " " << precision << " W=" << world;
    if (std::string(precision) == "32-true") {
      EXPECT_LE(relative_difference(sh, single), 1e-5) << algorithm << " W=" << world << " stage " << stage;
    }
  }
  const std::string plain = train(dir, "plain", "", 0, 8 * world, {"--precision", precision});
  EXPECT_GT(relative_difference(single, plain), 0.05) << "the clipping threshold never clipped";
}

TEST(Sharded, ClippingByNormUsesTheGlobalNorm) {
  for (int world : {2, 3, 4}) clipped_matches(world, "0.05", "norm", "32-true");
}
TEST(Sharded, ClippingByValue) {
  for (int world : {2, 3}) clipped_matches(world, "0.01", "value", "32-true");
}
TEST(Sharded, ClippingUnder16MixedEqualsDdp) { clipped_matches(2, "0.05", "norm", "16-mixed"); }

TEST(Sharded, BadOptionsExitTwoBeforeAnyWork) {
  TempDir dir;
  for (const char* opt : {"stage=3", "stage=", "stag=1", "bucket_cap_mb=abc"}) {
    std::vector<std::string> argv{PLRUN_PATH, "--accelerator",     "cpu", "--strategy", "ddp_sharded", "--devices",
                                  "2",        "--strategy-option", opt,   "--"};
    for (const auto& a : mlp_args({"--max-steps", "1", "--root-dir", dir / "bad"})) argv.push_back(a);
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 2) << opt << "\n" << r.output;
    EXPECT_NE(r.output.find("ddp_sharded"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("valid"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "bad")) << "a refused option must not start training";
}

nlohmann::json report(const TempDir& dir, const std::string& tag, const std::string& strategy, int world,
                      std::vector<std::string> extra) {
  const std::string path = dir / (tag + ".json");
  train(dir, tag, strategy, world, 8, with({"--optimizer", "adam", "--report", path, "--max-steps", "3"}, extra));
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(Sharded, OptimizerStateAndGradientsAreOneWthPerRank) {
  for (int world : {2, 4}) {
    TempDir dir;
    const auto ddp = report(dir, "ddp", "ddp", world, {});
    const auto s1 = report(dir, "s1", "ddp_sharded", world, {"--strategy-option", "stage=1"});
    const auto s2 = report(dir, "s2", "ddp_sharded", world, {"--strategy-option", "stage=2"});
    const double full = ddp.at("optimizer_state_bytes").get<double>();
    ASSERT_GT(full, 0);
    for (const auto* s : {&s1, &s2}) {
      const double mine = s->at("optimizer_state_bytes").get<double>();
      EXPECT_LE(mine, full / world * 1.01) << "W=" << world << " " << s->dump();
      EXPECT_GE(mine, full / world * 0.99) << "W=" << world;
    }
    const auto& st1 = s1.at("strategy_stats");
    const auto& st2 = s2.at("strategy_stats");
    const double trainable = st2.at("param_bytes").get<double>();  // the MLP has no frozen parameters
    EXPECT_DOUBLE_EQ(st1.at("grad_bytes").get<double>(), trainable);
    EXPECT_LE(st2.at("grad_bytes").get<double>(), trainable / world * 1.01) << st2.dump();
    EXPECT_GE(st2.at("grad_bytes").get<double>(), trainable / world * 0.99);
    // Stage 2's bucket memory is two (padded) buckets at most, stage 1's every bucket.
    EXPECT_DOUBLE_EQ(st1.at("comm_buffer_bytes").get<double>(), st1.at("bucket_bytes").get<double>());
    EXPECT_LE(st2.at("comm_buffer_bytes").get<double>(), 2 * (st2.at("bucket_bytes").get<double>() + 4.0 * world));
    // A bucket per parameter: each is reduce-scattered in its own gradient, no bucket memory at all.
    const auto s2p = report(dir, "s2p", "ddp_sharded", world, with({"--strategy-option", "stage=2"}, one_byte));
    const auto& st2p = s2p.at("strategy_stats");
    EXPECT_EQ(st2p.at("buckets").get<double>(), 6) << st2p.dump();  // 3 weights, 3 biases
    EXPECT_EQ(st2p.at("comm_buffer_bytes").get<double>(), 0) << st2p.dump();
    EXPECT_LE(st2p.at("grad_bytes").get<double>(), trainable / world * 1.05)
        << st2p.dump();  // < W elements a bucket over
  }
}

}  // namespace
