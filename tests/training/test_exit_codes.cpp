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
