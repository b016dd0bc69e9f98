// plrt-mlp's exit codes (pl::exit_code_for, plrt/sdk/exit_code.hpp): every bad input exits 2 with
// a message naming the bad value, alone and as a worker under plrun (which passes the code on):
// flags CLI11 refuses (before this rule, its own codes 105 to 114), a strategy that is not found,
// and a strategy plugin of another ABI (before, 1).  A real failure (the peers never come) is 1.
// plrun's own command line: tests/launcher/test_plrun.cpp; strategy options: test_strategy_options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "training_support.hpp"

namespace {

using namespace plrt_training;
using ::testing::HasSubstr;
using ::testing::Not;

struct BadInput {
  std::string what;               // the case, for failure messages
  std::vector<std::string> args;  // plrt-mlp's flags (after mlp_args' own)
  std::string says;               // in the output: the message names the bad value
  plrt_test::EnvVars env;
};

std::string broken_dir(const std::string& variant) { return std::string(PLRT_TEST_BROKEN_DIR) + "/" + variant; }

// A --data file of n rows of d features, labels 0, 1, 0, 1, ... except row `row`, which is `label`.
std::string data_file(const std::string& root, const std::string& name, int64_t n, int64_t d, int64_t row,
                      int64_t label) {
  std::vector<float> x(static_cast<size_t>(n * d), 0.5f);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back(i == row ? label : i % 2);
  const std::string path = root + "/" + name + ".safetensors";
  pl::safetensors::save(path, {{"x", pl::Tensor::from_vector(x, {n, d})}, {"y", pl::Tensor::from_vector(y, {n})}});
  return path;
}

std::vector<BadInput> bad_inputs(const std::string& root) {
  const std::vector<std::string> cpu = {"--accelerator", "cpu", "--root-dir", root};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), cpu.begin(), cpu.end());
    return a;
  };
  return {
      {"unknown flag", with({"--no-such-flag"}), "--no-such-flag", {}},
      {"bad number", with({"--epochs", "three"}), "three", {}},
      {"bad number (float)", with({"--momentum", "fast"}), "fast", {}},
      {"not one of the choices", with({"--optimizer", "sgdd"}), "sgdd", {}},
      {"extra positional", with({"stray"}), "stray", {}},
      {"missing value", with({"--batch-size"}), "--batch-size", {}},  // last: nothing follows it
      {"unknown strategy", with({"--strategy", "ddq"}), "no strategy plugin named 'ddq'", {}},
      {"plugin of a newer ABI major",
       with({"--strategy", "newer_major"}),
       "newer_major.so: built for plrt plugin ABI 2.3, newer than this runtime's major 1",
       {{"PL_PLUGIN_PATH", broken_dir("newer_major")}}},
      {"plugin that refuses the host",
       with({"--strategy", "refuses_host"}),
       "refuses_host.so: the plugin refused the host",
       {{"PL_PLUGIN_PATH", broken_dir("refuses_host")}}},
      {"plugin table smaller than ABI 1.0",
       with({"--strategy", "small_table"}),
       "small_table.so: PL_StrategyApi table is 16 bytes",
       {{"PL_PLUGIN_PATH", broken_dir("small_table")}}},
      // issue 17: values that were taken silently, or failed only after training
      {"negative seed", with({"--seed", "-1"}), "--seed '-1' is not valid: it must be an integer 0..", {}},
      {"seed past 2^64", with({"--seed", "12345678901234567890123"}), "--seed '12345678901234567890123'", {}},
      {"epochs below -1", with({"--epochs", "-2"}), "--epochs -2 is not valid: use -1 (no limit) or >= 0", {}},
      {"--save into a missing folder",
       with({"--save", root + "/no/such/w.safetensors"}),
       "/no/such does not exist",
       {}},
      {"--report into a missing folder", with({"--report", root + "/gone/r.json"}), "/gone does not exist", {}},
      {"--report is a folder", with({"--report", root}), "is a folder; give a file path", {}},
      // issue 32: a model that cannot fit started, then failed allocating
      {"--hidden beyond memory", with({"--hidden", "99999999999"}), "--hidden '99999999999': the model", {}},
      {"--hidden overflowing",
       with({"--hidden", "4000000000,4000000000,4000000000"}),
       "more parameters than a 64-bit count holds",
       {}},
      {"--early-stopping negative", with({"--early-stopping", "-1"}), "--early-stopping -1 is not valid", {}},
      {"--limit-train-batches not a number",
       with({"--limit-train-batches", "abc"}),
       "--limit-train-batches='abc' is not valid: --limit-train-batches takes a count of batches",
       {}},
      {"--limit-val-batches above 1.0",
       with({"--limit-val-batches", "2.5"}),
       "--limit-val-batches='2.5' is not valid",
       {}},
      {"--limit-train-batches leaving no batch",
       with({"--limit-train-batches", "0.001"}),
       "limit_train_batches=0.001 of a loader with",
       {}},
      {"--fast-dev-run negative", with({"--fast-dev-run", "-1"}), "fast_dev_run=-1 is not valid", {}},
      {"--min-epochs negative", with({"--min-epochs", "-1"}), "min_epochs=-1 is not valid", {}},
      {"--min-steps below -1", with({"--min-steps", "-5"}), "min_steps=-5 is not valid", {}},
      {"--log-every-n-steps 0", with({"--log-every-n-steps", "0"}), "log_every_n_steps=0 is not valid", {}},
      {"--num-sanity-val-steps -2", with({"--num-sanity-val-steps", "-2"}), "num_sanity_val_steps=-2 is not valid", {}},
      {"--val-check-interval not a number",
       with({"--val-check-interval", "often"}),
       "--val-check-interval='often' is not valid",
       {}},
      {"--val-check-interval 0", with({"--val-check-interval", "0"}), "val_check_interval=0 is not valid", {}},
      {"--val-check-interval past the epoch's batches",
       with({"--val-check-interval", "100000"}),
       "val_check_interval=100000 is more than the",
       {}},
      {"--val-check-interval fraction with --check-val-every-n-epoch None",
       with({"--val-check-interval", "0.5", "--check-val-every-n-epoch", "None"}),
       "val_check_interval=0.5 is a fraction of an epoch, but check_val_every_n_epoch is unset",
       {}},
      {"--profiler unknown", with({"--profiler", "fancy"}), "profiler='fancy' is not valid; valid: simple", {}},
      {"PL_TRAINER_PROFILER unknown",
       with({}),
       "PL_TRAINER_PROFILER='advanced' is not valid",
       {{"PL_TRAINER_PROFILER", "advanced"}}},
      {"--check-val-every-n-epoch 0",
       with({"--check-val-every-n-epoch", "0"}),
       "--check-val-every-n-epoch '0' is not valid",
       {}},
      {"PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH not a number",
       with({}),
       "PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH='often' is not valid",
       {{"PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH", "often"}}},
      {"PL_TRAINER_VAL_CHECK_INTERVAL above 1.0",
       with({}),
       "PL_TRAINER_VAL_CHECK_INTERVAL='1.5' is not valid",
       {{"PL_TRAINER_VAL_CHECK_INTERVAL", "1.5"}}},
      {"--save-top-k below -1", with({"--save-top-k", "-2"}), "--save-top-k -2 is not valid", {}},
      {"--early-stopping without held-out data",
       with({"--early-stopping", "2", "--heldout", "0"}),
       "--early-stopping watches the held-out data's val_loss / val_acc, but there is none",
       {}},
      {"--save-top-k with --no-checkpoint",
       with({"--save-top-k", "2", "--no-checkpoint"}),
       "--save-top-k writes checkpoints, which --no-checkpoint turns off",
       {}},
      {"PL_TRAINER_SEED negative", with({}), "PL_TRAINER_SEED='-1' is not valid", {{"PL_TRAINER_SEED", "-1"}}},
      {"PL_TRAINER_SEED past 2^64",
       with({}),
       "PL_TRAINER_SEED='18446744073709551616' is not valid: it must be an integer 0..18446744073709551615",
       {{"PL_TRAINER_SEED", "18446744073709551616"}}},
      {"PL_TRAINER_MAX_EPOCHS past int64",
       with({}),
       "PL_TRAINER_MAX_EPOCHS='99999999999999999999' is not valid",
       {{"PL_TRAINER_MAX_EPOCHS", "99999999999999999999"}}},
      {"PL_TRAINER_ENABLE_MODEL_SUMMARY not 0 or 1",
       with({}),
       "PL_TRAINER_ENABLE_MODEL_SUMMARY='yes' is not valid: use 0 or 1",
       {{"PL_TRAINER_ENABLE_MODEL_SUMMARY", "yes"}}},
      {"PL_TRAINER_LIMIT_PREDICT_BATCHES not a number",
       with({}),
       "PL_TRAINER_LIMIT_PREDICT_BATCHES='some' is not valid",
       {{"PL_TRAINER_LIMIT_PREDICT_BATCHES", "some"}}},
      {"PL_TRAINER_LIMIT_PREDICT_BATCHES above 1.0",
       with({}),
       "PL_TRAINER_LIMIT_PREDICT_BATCHES='1.5' is not valid",
       {{"PL_TRAINER_LIMIT_PREDICT_BATCHES", "1.5"}}},
      {"PL_TRAINER_TIMEOUT not a number",
       with({}),
       "PL_TRAINER_TIMEOUT='soon' is not valid",
       {{"PL_TRAINER_TIMEOUT", "soon"}}},
      {"PL_TRAINER_TIMEOUT negative",
       with({}),
       "PL_TRAINER_TIMEOUT='-3' is not valid: give seconds",
       {{"PL_TRAINER_TIMEOUT", "-3"}}},
      {"a label of 5,000,000",
       with({"--data", data_file(root, "huge_label", 8, 4, 3, 5000000)}),
       "y[3] (row 3) = 5000000 is not a valid label: labels must be 0..65535",
       {}},
      {"a label >= --classes",
       with({"--data", data_file(root, "over_classes", 8, 4, 6, 7), "--classes", "5"}),
       "y[6] (row 6) = 7 is not a valid label: labels must be 0..4 (--classes 5)",
       {}},
      {"an empty dataset", with({"--data", data_file(root, "empty", 0, 4, -1, 0)}), "an empty dataset", {}},
      {"--val-data of other features",
       with({"--data", data_file(root, "four", 8, 4, -1, 0), "--val-data", data_file(root, "five", 8, 5, -1, 0)}),
       "x has 5 features",
       {}},
      {"--val-data without --data", with({"--val-data", root + "/v.safetensors"}), "needs --data", {}},
      {"--classes 1", with({"--classes", "1"}), "--classes 1 is not valid", {}},
  };
}

}  // namespace

TEST(ExitCodes, PlrtMlpExitsTwoNamingEachBadInput) {
  TempDir dir;
  for (const auto& c : bad_inputs(dir.path.string())) {
    auto r = run(mlp_args(c.args), c.env);
    EXPECT_EQ(r.exit_code, 2) << c.what << ": " << r.status() << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says)) << c.what;
    EXPECT_THAT(r.output, Not(HasSubstr("steps in"))) << c.what << ": it trained";
  }
  EXPECT_FALSE(fs::exists(dir.path / "lightning_logs")) << "training started";
}

TEST(ExitCodes, HelpStillExitsZero) {
  auto r = run({MLP_PATH, "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--strategy-option"));
}

// The same inputs given to every worker: each stops with 2, and plrun exits with it.
TEST(ExitCodes, UnderPlrunAWorkersBadInputIsPlrunsExitTwo) {
  TempDir dir;
  for (const auto& c : bad_inputs(dir.path.string())) {
    std::vector<std::string> a{PLRUN_PATH, "--accelerator", "cpu", "--devices", "2", "--"};
    auto program = mlp_args(c.args);
    a.insert(a.end(), program.begin(), program.end());
    auto r = run(a, c.env);
    EXPECT_EQ(r.exit_code, 2) << c.what << ": " << r.status() << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says)) << c.what;
    EXPECT_THAT(r.output, HasSubstr("exited with code 2")) << c.what << ": plrun names the worker's code";
  }
  EXPECT_FALSE(fs::exists(dir.path / "lightning_logs")) << "training started";
}

// Not bad input: rank 0 of a two-process job whose rank 1 never comes.  The rendezvous fails at
// the timeout with 1, as every failure that is not the user's input.
TEST(ExitCodes, APeerThatNeverComesIsAFailureNotBadInput) {
  TempDir dir;
  const int port = plrt_test::free_tcp_port();
  auto r = run(mlp_args({"--accelerator", "cpu", "--strategy", "ddp", "--devices", "2", "--timeout", "2", "--root-dir",
                         dir.path.string()}),
               {{"RANK", "0"},
                {"WORLD_SIZE", "2"},
                {"LOCAL_RANK", "0"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {"TORCHELASTIC_RUN_ID", "exit-codes"},
                {"PL_JOB_TOKEN", plrt_test::random_token()}});
  EXPECT_EQ(r.exit_code, 1) << r.status() << "\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("plrt-mlp: error: "));
}

// A checkpoint's trainer.json with values no run writes: --resume refuses it with 2, naming the
// field, before training (issue 17: a negative epoch, batches_done past the epoch, world_size 0).
TEST(ExitCodes, ResumeRefusesTrainerJsonOutOfRange) {
  TempDir dir;
  const std::vector<std::string> base{"--accelerator", "cpu", "--strategy", "single_device",
                                      "--devices",     "1",   "--samples",  "240",
                                      "--heldout",     "0",   "--root-dir", dir.path.string()};
  auto args = base;
  args.insert(args.end(), {"--epochs", "1"});
  auto first = run(mlp_args(args));
  ASSERT_TRUE(first.ok()) << first.status() << "\n" << first.output;
  const fs::path ckpt = dir.path / "lightning_logs" / "version_0" / "checkpoints" / "last";
  ASSERT_TRUE(fs::exists(ckpt / "trainer.json"));
  nlohmann::json saved;
  std::ifstream(ckpt / "trainer.json") >> saved;
  const struct {
    const char* field;
    int64_t value;
    std::string says;
  } cases[] = {
      {"epoch", -1, "has epoch -1; valid: an epoch number >= 0"},
      {"global_step", -3, "global_step (-3)"},
      {"batches_done", 1000000000, "after batches_done 1000000000 but an epoch of the 240 training samples"},
      {"world_size", 0, "has world_size 0; valid: the process count, >= 1"},
      {"callbacks", 5, "has \"callbacks\" that is not an object"},
  };
  for (const auto& c : cases) {
    auto j = saved;
    j[c.field] = c.value;
    std::ofstream(ckpt / "trainer.json") << j.dump(2);
    auto resume = base;
    resume.insert(resume.end(), {"--epochs", "3", "--resume", ckpt.string()});
    auto r = run(mlp_args(resume));
    EXPECT_EQ(r.exit_code, 2) << c.field << ": " << r.status() << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says)) << c.field;
    EXPECT_THAT(r.output, Not(HasSubstr("steps in"))) << c.field << ": it trained";
  }
}
