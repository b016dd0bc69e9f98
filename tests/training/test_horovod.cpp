// horovod end to end, through plrun and plrt-mlp as a user runs them (docs/horovod.md):
//  - W ranks with scale_lr (the default) = one process on the union batch with lr x W (SGD), to 1e-5;
//    scale_lr=false = ddp; a resumed run keeps the checkpoint's (already scaled) learning rate
//  - accumulate_grad_batches: one synchronisation and one optimizer step per window
//  - tensor fusion: threshold 0 (option or HOROVOD_FUSION_THRESHOLD) sends each gradient alone; a
//    threshold that holds every gradient and a long cycle send one collective per step; a
//    threshold of two layers' gradients splits them (and a backward shorter than the cycle takes one
//    negotiation); gradient_predivide_factor and op=sum keep the arithmetic
//  - bad options and bad HOROVOD_* variables exit 2 before any work, naming them
#include <algorithm>
#include <tuple>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

// The sample's model (24-16-12-5): six gradients, 2 x (24*16 + 16*12 + 12*5) + (16 + 12 + 5) floats.
constexpr int kGradients = 6;

std::vector<std::string> horovod(int world, std::vector<std::string> program,
                                 const std::vector<std::string>& options = {}) {
  std::vector<std::string> a{PLRUN_PATH,  "--accelerator",      "cpu", "--strategy", "horovod",
                             "--devices", std::to_string(world)};
  for (const auto& o : options) a.insert(a.end(), {"--strategy-option", o});
  a.push_back("--");
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

// mlp_args with flag `name` set to `value` (CLI11 refuses a flag given twice).
std::vector<std::string> set(std::vector<std::string> args, const std::string& name, const std::string& value) {
  auto it = std::find(args.begin(), args.end(), name);
  if (it != args.end() && it + 1 != args.end())
    *(it + 1) = value;
  else
    args.insert(args.end(), {name, value});
  return args;
}

// 40 steps of 8 samples per rank at lr 0.05 (mlp_args'); `changes` sets flags (name, value).
std::vector<std::string> job(const TempDir& dir, const std::string& name,
                             const std::vector<std::pair<std::string, std::string>>& changes) {
  auto a = mlp_args({"--epochs", "100", "--no-checkpoint"});
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--batch-size", "8"},
                                                        {"--max-steps", "40"},
                                                        {"--root-dir", dir / name},
                                                        {"--save", dir / (name + ".safetensors")}})
    a = set(a, flag, value);
  for (const auto& [flag, value] : changes) a = set(a, flag, value);
  return a;
}

// One process on the union of W ranks' batches of 8, at `lr`.
std::vector<std::string> single(const TempDir& dir, const std::string& name, int world, const std::string& lr,
                                const std::vector<std::pair<std::string, std::string>>& changes = {}) {
  auto a = job(dir, name, {{"--batch-size", std::to_string(8 * world)}, {"--lr", lr}});
  a.insert(a.end(), {"--strategy", "single_device", "--devices", "1"});
  for (const auto& [flag, value] : changes) a = set(a, flag, value);
  return a;
}

void matches_union_with_scaled_lr(int world) {
  TempDir dir;
  auto h = run(horovod(world, job(dir, "horovod", {})), {{"PL_LOG_LEVEL", "info"}});
  EXPECT_RAN(h);
  const std::string scaled = world == 2 ? "0.1" : "0.15";
  EXPECT_NE(h.output.find("learning rate 0.05 -> " + scaled), std::string::npos)
      << "rank 0 says the learning rate was scaled, with both values\n"
      << h.output;
  auto one = run(single(dir, "single", world, scaled));
  EXPECT_RAN(one);
  EXPECT_LE(relative_difference(dir / "horovod.safetensors", dir / "single.safetensors"), 1e-5);
  // Without the scaling the runs differ: the comparison is not vacuous.
  auto unscaled = run(single(dir, "unscaled", world, "0.05"));
  EXPECT_RAN(unscaled);
  EXPECT_GT(relative_difference(dir / "horovod.safetensors", dir / "unscaled.safetensors"), 1e-3);
}

TEST(Horovod, TwoRanksEqualOneProcessOnTheUnionBatchWithLrTimesTwo) { matches_union_with_scaled_lr(2); }
TEST(Horovod, ThreeRanksEqualOneProcessOnTheUnionBatchWithLrTimesThree) { matches_union_with_scaled_lr(3); }

TEST(Horovod, ScaleLrFalseEqualsDdpAndPredivideOrSumKeepTheArithmetic) {
  TempDir dir;
  auto ddp = run(plrun("ddp", 2, job(dir, "ddp", {})));
  EXPECT_RAN(ddp);
  for (const auto& [name, options, lr] : std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>{
           {"plain", {"scale_lr=false"}, "0.05"},
           {"predivide", {"scale_lr=false", "gradient_predivide_factor=2"}, "0.05"},
           // the sum of 2 ranks' mean gradients with half the rate is the mean with the whole rate
           {"sum", {"scale_lr=false", "op=sum"}, "0.025"}}) {
    auto h = run(horovod(2, job(dir, name, {{"--lr", lr}}), options));
    EXPECT_RAN(h);
    EXPECT_EQ(h.output.find("learning rate 0.05 ->"), std::string::npos) << "scale_lr=false keeps the rate";
    EXPECT_LE(relative_difference(dir / (name + ".safetensors"), dir / "ddp.safetensors"), 1e-5) << name;
  }
}

TEST(Horovod, OneSynchronisationAndOneStepPerAccumulationWindow) {
  TempDir dir;
  auto h = run(horovod(2, job(dir, "acc",
                              {{"--batch-size", "4"},
                               {"--accumulate-grad-batches", "3"},
                               {"--max-steps", "20"},
                               {"--report", dir / "acc.json"}})));
  EXPECT_RAN(h);
  auto r = report(dir / "acc.json");
  EXPECT_EQ(r["steps"], 20) << r.dump(2);
  EXPECT_EQ(r["strategy_stats"]["synced_steps"], 20) << "one synchronisation per window of 3 micro-batches";
  // ... and the result is the window's batch of 2 x 3 x 4 samples with lr x 2.
  auto big = run(single(dir, "big", 3, "0.1", {{"--max-steps", "20"}}));
  EXPECT_RAN(big);
  EXPECT_LE(relative_difference(dir / "acc.safetensors", dir / "big.safetensors"), 1e-5);
}

// The fusion rule, seen through the collectives it issued.
nlohmann::json fusion_run(const TempDir& dir, const std::string& name, const std::vector<std::string>& options,
                          plrt_test::EnvVars env = {}) {
  auto h = run(horovod(2, job(dir, name, {{"--max-steps", "10"}, {"--report", dir / (name + ".json")}}), options),
               std::move(env));
  EXPECT_RAN(h);
  auto r = report(dir / (name + ".json"))["strategy_stats"];
  EXPECT_EQ(r["synced_steps"], 10) << name;
  EXPECT_EQ(r["fused_tensors"], 10 * kGradients) << name << ": every gradient once per step";
  return r;
}

TEST(Horovod, TensorFusionFollowsThresholdAndCycleTime) {
  TempDir dir;
  auto ref = run(horovod(2, job(dir, "ref", {{"--max-steps", "10"}})));
  EXPECT_RAN(ref);
  // threshold 0: no fusion, each gradient alone (the option, and Horovod's variable)
  EXPECT_EQ(fusion_run(dir, "alone", {"fusion_threshold_mb=0"})["allreduces"], 10 * kGradients);
  EXPECT_EQ(fusion_run(dir, "alone_env", {}, {{"HOROVOD_FUSION_THRESHOLD", "0"}})["allreduces"], 10 * kGradients);
  // a buffer that holds everything and a cycle longer than backward: one collective per step
  EXPECT_EQ(fusion_run(dir, "one", {"cycle_time_ms=2000"})["allreduces"], 10);
  EXPECT_EQ(fusion_run(dir, "one_env", {}, {{"HOROVOD_CYCLE_TIME", "2000"}})["allreduces"], 10);
  // 1000 bytes, gradients in backward's order (bytes): layers.2.bias 20, .weight 240, layers.1.bias
  // 48, .weight 768, layers.0.bias 64, .weight 1536: [20 240 48] fills up to 1076 > 1000 and goes;
  // [768 64]; the 1536 alone.  Three collectives per step.
  EXPECT_EQ(fusion_run(dir, "split", {"cycle_time_ms=2000", "fusion_threshold_mb=0.00095367431640625"})["allreduces"],
            30);
  for (const char* name : {"alone", "alone_env", "one", "one_env", "split"})
    EXPECT_LE(relative_difference(dir / (std::string(name) + ".safetensors"), dir / "ref.safetensors"), 1e-6) << name;
}

// A backward shorter than the cycle takes one negotiation per step: the step's first cycle comes a
// cycle_time_ms after its first gradient, or at the end of backward, not at once (a cycle there
// found little ready and cost every step one more control allreduce, beside backward).  The model
// is wider than the sample's so that backward lasts milliseconds: time enough for such a cycle.
TEST(Horovod, ABackwardShorterThanTheCycleTakesOneNegotiationPerStep) {
  TempDir dir;
  auto h = run(horovod(2,
                       job(dir, "wide",
                           {{"--features", "784"},
                            {"--hidden", "1024,1024"},
                            {"--batch-size", "64"},
                            {"--max-steps", "10"},
                            {"--report", dir / "wide.json"}}),
                       {"cycle_time_ms=2000"}));
  EXPECT_RAN(h);
  auto r = report(dir / "wide.json")["strategy_stats"];
  EXPECT_EQ(r["synced_steps"], 10) << r.dump(2);
  EXPECT_EQ(r["allreduces"], 10) << r.dump(2);
  EXPECT_EQ(r["cycles"], 10) << "one negotiation per step\n" << r.dump(2);
}

TEST(Horovod, BadOptionsAndVariablesExitTwoBeforeAnyWork) {
  TempDir dir;
  auto refused = [&](const std::vector<std::string>& options, plrt_test::EnvVars env, const std::string& named) {
    auto r = run(horovod(2, mlp_args({"--max-steps", "1", "--root-dir", dir / "bad"}), options), std::move(env));
    EXPECT_EQ(r.exit_code, 2) << named << "\n" << r.output;
    EXPECT_NE(r.output.find("horovod"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
  };
  refused({"op=adasum"}, {}, "op='adasum'");
  refused({"op=sum", "gradient_predivide_factor=2"}, {}, "gradient_predivide_factor='2'");
  refused({"gradient_predivide_factor=0"}, {}, "gradient_predivide_factor='0'");
  refused({"fusion_threshold_mb=-1"}, {}, "fusion_threshold_mb='-1'");
  refused({"cycle_time_ms=soon"}, {}, "cycle_time_ms='soon'");
  refused({"scale_lr=maybe"}, {}, "scale_lr");
  refused({"bucket_cap_mb=5"}, {}, "unknown option 'bucket_cap_mb'");
  refused({}, {{"HOROVOD_FUSION_THRESHOLD", "64MB"}}, "HOROVOD_FUSION_THRESHOLD='64MB'");
  refused({}, {{"HOROVOD_CYCLE_TIME", "-5"}}, "HOROVOD_CYCLE_TIME='-5'");
  EXPECT_FALSE(fs::exists(dir / "bad")) << "a refused option must not start training";
}

}  // namespace
