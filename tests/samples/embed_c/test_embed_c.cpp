// samples/embed_c as its README runs it: under plrun at 2 and 3 ranks, under a torchrun-style
// launch where rank 0 serves the store, and alone (a world of one).  Every rank's printed allreduce
// and allgather are compared with values computed here; the README's one-line compiler command
// builds it from the headers alone; bad input exits 2 naming it, a peer that never comes exits 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The variables of an enclosing launcher (or a developer's shell) that would change what embed_c does.
const std::vector<std::string> kLauncherEnv = {"RANK",
                                               "WORLD_SIZE",
                                               "LOCAL_RANK",
                                               "MASTER_ADDR",
                                               "MASTER_PORT",
                                               "PL_JOB_TOKEN",
                                               "PL_USE_AGENT_STORE",
                                               "PL_PLUGIN_PATH",
                                               "PL_STORE_PREFIX",
                                               "TORCHELASTIC_RUN_ID",
                                               "PL_LOG_LEVEL",
                                               "SLURM_PROCID",
                                               "SLURM_NTASKS",
                                               "TORCHELASTIC_USE_AGENT_STORE"};

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/plrt-embed-c-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

plrt_test::ProcessResult run(std::vector<std::string> argv, plrt_test::EnvVars env = {}) {
  plrt_test::ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.env = std::move(env);
  spec.unset_env = kLauncherEnv;
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(60);
  return plrt_test::run_job({spec}, w).processes.at(0);
}

// What rank `rank` of `world` must print (without plrun's "[rank N] " prefix).
std::vector<std::string> expected_lines(int rank, int world) {
  const std::string who = "embed_c rank " + std::to_string(rank) + "/" + std::to_string(world) + ": ";
  std::string sums, slots;
  const int ranks_sum = world * (world + 1) / 2;
  for (int i = 0; i < 4; ++i) sums += (i ? " " : "") + std::to_string((i + 1) * ranks_sum);
  for (int q = 0; q < world; ++q) slots += (q ? " [" : "[") + std::to_string(q) + " " + std::to_string(q * q) + "]";
  return {who + "allreduce sum [" + sums + "] ok", who + "allgather " + slots + " ok", who + "done"};
}

void expect_ranks_printed(const std::string& output, int world, const std::string& prefix_of_rank) {
  for (int r = 0; r < world; ++r)
    for (const auto& line : expected_lines(r, world)) {
      const std::string prefix = prefix_of_rank.empty() ? "" : "[" + prefix_of_rank + " " + std::to_string(r) + "] ";
      EXPECT_THAT(output, HasSubstr(prefix + line + "\n")) << output;
    }
  EXPECT_THAT(output, Not(HasSubstr("WRONG")));
  EXPECT_THAT(output, Not(HasSubstr("error")));
}

}  // namespace

TEST(EmbedC, AloneIsAWorldOfOne) {
  auto r = run({EMBED_C_PATH});
  ASSERT_EQ(r.exit_code, 0) << r.status() << "\n" << r.output;
  expect_ranks_printed(r.output, 1, "");
  EXPECT_THAT(r.output, Not(HasSubstr("unauthenticated"))) << "alone, it makes a token for its own store";
}

class EmbedCUnderPlrun : public ::testing::TestWithParam<int> {};

TEST_P(EmbedCUnderPlrun, EveryRankSeesTheSumAndTheGather) {
  const int world = GetParam();
  auto r = run({PLRUN_PATH, "--accelerator", "cpu", "--devices", std::to_string(world), "--", EMBED_C_PATH});
  ASSERT_EQ(r.exit_code, 0) << r.status() << "\n" << r.output;
  expect_ranks_printed(r.output, world, "rank");
}

INSTANTIATE_TEST_SUITE_P(Ranks, EmbedCUnderPlrun, ::testing::Values(2, 3));

// Without plrun (no PL_USE_AGENT_STORE): rank 0 serves the store and keeps it until the others left.
TEST(EmbedC, RankZeroServesTheStoreUnderAnotherLauncher) {
  plrt_test::DistJobOptions o;
  o.argv = {EMBED_C_PATH};
  o.world_size = 3;
  o.master_port = plrt_test::free_tcp_port();
  o.token = plrt_test::random_token();
  o.agent_store = false;
  auto specs = plrt_test::dist_job(o);
  for (auto& s : specs) s.unset_env = {"PL_PLUGIN_PATH", "PL_STORE_PREFIX", "TORCHELASTIC_USE_AGENT_STORE"};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(60);
  auto job = plrt_test::run_job(specs, w);
  ASSERT_TRUE(job.all_ok()) << job.report();
  for (int r = 0; r < 3; ++r)
    for (const auto& line : expected_lines(r, 3)) EXPECT_THAT(job.processes[r].output, HasSubstr(line + "\n"));
}

// The README's one line, with the source tree's headers for <prefix>/include: C99, no warning.
TEST(EmbedC, TheReadmesCompilerLineBuildsIt) {
  TempDir dir;
  const std::string out = (dir.path / "embed_c").string();
  const std::string cmd = std::string(C_COMPILER) + " -std=c99 -pedantic -Wall -Wextra -Werror " + EMBED_C_SOURCE +
                          " " + PLRT_INCLUDE_FLAGS + " -L" + PLRT_LIB_DIR + " -lplrt_runtime -Wl,-rpath," +
                          PLRT_LIB_DIR + " -o " + out;
  auto cc = run({"/bin/sh", "-c", cmd + " 2>&1"});
  ASSERT_EQ(cc.exit_code, 0) << cmd << "\n" << cc.output;
  auto r = run({out});
  ASSERT_EQ(r.exit_code, 0) << r.status() << "\n" << r.output;
  expect_ranks_printed(r.output, 1, "");
}

TEST(EmbedC, BadInputExitsTwoNamingIt) {
  TempDir dir;
  // A gloo plugin built for a future ABI, found first on PL_PLUGIN_PATH.
  const fs::path abi2 = dir.path / "libplrt_process_group_gloo.so";
  fs::copy_file(fs::path(PLRT_TEST_BROKEN_DIR) / "newer_major" / "libplrt_strategy_newer_major.so", abi2);
  struct Case {
    std::vector<std::string> args;
    plrt_test::EnvVars env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--timeout-ms", "soon"}, {}, "--timeout-ms 'soon' is not valid"},
      {{"--timeout-ms", "0"}, {}, "--timeout-ms '0' is not valid"},
      {{"--timeout-ms"}, {}, "--timeout-ms needs a value"},
      {{"stray"}, {}, "'stray' is not an option"},
      {{}, {{"WORLD_SIZE", "0"}}, "WORLD_SIZE='0' is not valid"},
      {{}, {{"WORLD_SIZE", "two"}}, "WORLD_SIZE='two' is not valid"},
      {{}, {{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_PORT", "29500"}}, "RANK='2' is not valid"},
      {{}, {{"WORLD_SIZE", "2"}, {"RANK", "1"}}, "MASTER_PORT is not set"},
      {{}, {{"MASTER_PORT", "70000"}}, "MASTER_PORT='70000' is not valid"},
      {{"--plugin-path", dir.path.string()}, {}, "built for plrt plugin ABI 2.3, newer than this runtime's major 1"},
      {{"--plugin-path", "/nonexistent-plrt-plugins"},
       {},
       "plugin folder '/nonexistent-plrt-plugins' (plugin_dirs[0], plrun --plugin-path) does not exist"},
      {{"--plugin-path"}, {}, "--plugin-path needs a value"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{EMBED_C_PATH};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = run(argv, c.env);
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.status() << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says));
    EXPECT_THAT(r.output, Not(HasSubstr("allreduce")));
  }
  // A worker's bad input is plrun's exit 2.
  auto r = run({PLRUN_PATH, "--accelerator", "cpu", "--devices", "2", "--", EMBED_C_PATH, "--timeout-ms", "soon"});
  EXPECT_EQ(r.exit_code, 2) << r.status() << "\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("--timeout-ms 'soon' is not valid"));
}

// Rank 0 of two, serving the store, whose rank 1 never comes: the group's rendezvous fails at the
// timeout, a failure (1), not bad input.
TEST(EmbedC, APeerThatNeverComesExitsOneAtTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run({EMBED_C_PATH, "--timeout-ms", "1500"}, {{"RANK", "0"},
                                                        {"WORLD_SIZE", "2"},
                                                        {"MASTER_ADDR", "127.0.0.1"},
                                                        {"MASTER_PORT", std::to_string(plrt_test::free_tcp_port())},
                                                        {"PL_JOB_TOKEN", plrt_test::random_token()}});
  EXPECT_EQ(r.exit_code, 1) << r.status() << "\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("embed_c: error: creating the gloo process group"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << "bounded by --timeout-ms";
}
