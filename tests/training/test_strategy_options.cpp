// Strategy options given without recompiling: TrainerOptions::strategy_options, plrt-mlp's and
// plrun's --strategy-option (PL_TRAINER_STRATEGY_OPTIONS).  plrun's win over the program's for a
// key; the trainer applies them (ddp's buckets change); a bad one fails when the Trainer is made,
// with exit code 2 from plrt-mlp, before any training.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <plrt/sdk/options.hpp>
#include <plrt/sdk/trainer.hpp>

#include "training_support.hpp"
#include "unit_support.hpp"

using plrt_test::invalid_message;  // unit_support.hpp

namespace {

using namespace plrt_training;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

using plrt_test::ScopedEnv;  // unit_support.hpp

pl::RuntimeOptions quiet() {
  pl::RuntimeOptions ro;
  ro.log_level = "warn";
  return ro;
}

// ddp2 on two cpu "devices" in this one process: a strategy with options that needs no launcher.
pl::TrainerOptions ddp2(pl::OptionList options) {
  pl::TrainerOptions o;
  o.strategy = "ddp2";
  o.accelerator = "cpu";
  o.devices = 2;
  o.enable_progress_bar = false;
  o.enable_checkpointing = false;
  o.strategy_options = std::move(options);
  return o;
}

// The number of ddp buckets plrt-mlp's report gives.
double buckets(const TempDir& dir, const std::string& name) {
  auto j = report(dir / (name + ".json"));
  return j.contains("strategy_stats") && j["strategy_stats"].contains("buckets")
             ? j["strategy_stats"]["buckets"].get<double>()
             : -1;
}

}  // namespace

TEST(StrategyOptions, TheVariableGoesOnTopOfTheTrainersOptions) {
  ScopedEnv env(pl::kStrategyOptionsVariable, R"({"bucket_cap_mb":"0.5"})");
  pl::Trainer t(ddp2({{"bucket_cap_mb", "25"}, {"pg.probe_ms", "100"}}), quiet());
  EXPECT_THAT(t.options().strategy_options, ElementsAre(Pair("pg.probe_ms", "100"), Pair("bucket_cap_mb", "0.5")));
  EXPECT_THAT(t.job().strategy_options, ElementsAre(Pair("pg.probe_ms", "100"), Pair("bucket_cap_mb", "0.5")));
  // read_env = false: the program's options as they are.
  auto o = ddp2({{"bucket_cap_mb", "25"}});
  o.read_env = false;
  pl::Trainer own(o, quiet());
  EXPECT_THAT(own.options().strategy_options, ElementsAre(Pair("bucket_cap_mb", "25")));
}

TEST(StrategyOptions, ABadOptionFailsWhenTheTrainerIsMade) {
  EXPECT_THAT(invalid_message([] {
                pl::Trainer t(ddp2({{"bucket_cap_mb", "abc"}}), quiet());
              }),
              AllOf(HasSubstr("strategy 'ddp2'"), HasSubstr("bucket_cap_mb='abc' is not valid")));
  EXPECT_THAT(invalid_message([] {
                pl::Trainer t(ddp2({{"stage", "1"}}), quiet());
              }),
              AllOf(HasSubstr("unknown option 'stage'"), HasSubstr("valid options: bucket_cap_mb, pg.<name>")));
  {
    ScopedEnv env(pl::kStrategyOptionsVariable, R"({"broadcast_buffers":"true"})");
    EXPECT_THAT(invalid_message([] { pl::Trainer t(ddp2({}), quiet()); }),
                HasSubstr("unknown option 'broadcast_buffers'"));
  }
  ScopedEnv env(pl::kStrategyOptionsVariable, "bucket_cap_mb=1");
  EXPECT_THAT(invalid_message([] { pl::Trainer t(ddp2({}), quiet()); }),
              HasSubstr("PL_TRAINER_STRATEGY_OPTIONS='bucket_cap_mb=1' is not valid: not JSON"));
}

TEST(StrategyOptions, PlrunsOptionsReachTheTrainerAndWinOverTheProgramsOwn) {
  TempDir dir;
  // 24-16-12-5: gradients of 20, 240, 48, 768, 64 and 1536 bytes, last layer first.  Default caps
  // (1 MiB first, 25 MiB): one bucket.  0.001 MiB (1048 bytes): {20, 240, 48}, {768, 64}, {1536}.
  const std::vector<std::string> small = {"--strategy-option", "bucket_cap_mb=0.001", "--strategy-option",
                                          "first_bucket_cap_mb=0.001"};
  const std::vector<std::string> large = {"--strategy-option", "bucket_cap_mb=25", "--strategy-option",
                                          "first_bucket_cap_mb=25"};
  auto mlp = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--max-steps", "3",        "--no-checkpoint",     "--root-dir",
                                  dir / name,    "--report", dir / (name + ".json")};
    a.insert(a.end(), extra.begin(), extra.end());
    return mlp_args(a);
  };
  auto with_plrun_options = [&](std::vector<std::string> program) {
    auto a = plrun("ddp", 2, std::move(program));
    a.insert(a.begin() + 1, small.begin(), small.end());
    return a;
  };
  auto plain = run(plrun("ddp", 2, mlp("plain", {})));
  EXPECT_RAN(plain);
  EXPECT_EQ(buckets(dir, "plain"), 1);
  auto own = run(plrun("ddp", 2, mlp("own", small)));  // the program's own --strategy-option
  EXPECT_RAN(own);
  EXPECT_EQ(buckets(dir, "own"), 3);
  auto both = run(with_plrun_options(mlp("both", large)));  // plrun's win
  EXPECT_RAN(both);
  EXPECT_EQ(buckets(dir, "both"), 3);
}

TEST(StrategyOptions, PlrtMlpRefusesBadOptionsWithExitTwoBeforeTraining) {
  TempDir dir;
  auto alone = [&](std::vector<std::string> extra, plrt_test::EnvVars env = {}) {
    std::vector<std::string> a = {"--strategy", "ddp2", "--accelerator", "cpu",
                                  "--devices",  "2",    "--root-dir",    dir.path.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(mlp_args(a), std::move(env));
  };
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--strategy-option", "bucket_cap_mb=abc"}, "bucket_cap_mb='abc' is not valid"},
           {{"--strategy-option", "broadcast_buffers=true"}, "ddp2: unknown option 'broadcast_buffers'"},
           {{"--strategy-option", "stage"}, "--strategy-option 'stage' is not valid: it has no '='"},
           {{"--strategy-option", "=1"}, "the key is empty"},
       }) {
    auto r = alone(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(says));
    EXPECT_THAT(r.output, Not(HasSubstr("steps in")));
  }
  auto bad_env = alone({}, {{"PL_TRAINER_STRATEGY_OPTIONS", "{\"bucket_cap_mb\": 1}"}});
  EXPECT_EQ(bad_env.exit_code, 2) << bad_env.output;
  EXPECT_THAT(bad_env.output, HasSubstr("PL_TRAINER_STRATEGY_OPTIONS='{\"bucket_cap_mb\": 1}' is not valid"));
  // Under plrun, which cannot check the program's own flags: every worker stops at its Trainer.
  auto launched = run(plrun("ddp", 2, mlp_args({"--root-dir", dir.path.string(), "--strategy-option", "bogus=1"})));
  EXPECT_EQ(launched.exit_code, 2) << launched.output;
  EXPECT_THAT(launched.output, HasSubstr("ddp: unknown option 'bogus'"));
  EXPECT_FALSE(fs::exists(dir.path / "lightning_logs")) << "training started";
}
