// plrun --log-dir (torchrun's): every attempt's (round's) worker output also goes, raw, to
// <dir>/<run id>/attempt_<round>/<global rank or node<k>>/{stdout,stderr}.log, while the terminal
// keeps the prefixed lines; a --log-dir plrun cannot write to exits 2 before anything starts.
#include <gmock/gmock.h>

#include <fstream>
#include <iterator>

#include "launcher_support.hpp"

using namespace launcher_test;
using ::testing::HasSubstr;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "no file " << p;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(LaunchLogs, EachAttemptsOutputIsKeptApartPerRank) {
  ScratchDir dir;
  const fs::path logs = dir.path() / "logs" / "deep";  // made by plrun
  // Rank 1 fails with code 3 in round 0; round 1 succeeds.
  auto p = run_plrun(
      ppd_job(2, {"--max-restarts", "2", "--grace-period", "1", "--run-id", "job-9", "--log-dir", logs.string()},
              {"--out-dir", dir.str(), "--fail-rank", "1", "--exit-code", "3", "--fail-until-restart", "1",
               "--sleep-ms", "200", "--print-restart", "hello from round", "--eprint", "oops"}));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_THAT(p.output, HasSubstr("restart 1 of 2 (round 1)"));
  // The terminal still gets the prefixed lines of both rounds.
  EXPECT_THAT(p.output, HasSubstr("[rank 1] hello from round 0"));
  EXPECT_THAT(p.output, HasSubstr("[rank 1] hello from round 1"));
  for (int round : {0, 1})
    for (int rank : {0, 1}) {
      SCOPED_TRACE("attempt " + std::to_string(round) + ", rank " + std::to_string(rank));
      const fs::path folder = logs / "job-9" / ("attempt_" + std::to_string(round)) / std::to_string(rank);
      EXPECT_EQ(slurp(folder / "stdout.log"), "hello from round " + std::to_string(round) + "\n");
      EXPECT_EQ(slurp(folder / "stderr.log"), "oops\n");
    }
  EXPECT_FALSE(fs::exists(logs / "job-9" / "attempt_2")) << "only two attempts ran";
  expect_all_gone(dir, ranks(0, 2));
}

TEST(LaunchLogs, AProcessPerNodeLogsUnderItsNode) {
  ScratchDir dir;
  const fs::path logs = dir.path() / "logs";
  auto p = run_plrun(ppd_job(2, {"--strategy-option", "launch=spawn", "--log-dir", logs.string()},
                             {"--out-dir", dir.str(), "--print", "spawned"}));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_THAT(p.output, HasSubstr("[node 0] spawned"));
  // Raw: without plrun's prefix.
  EXPECT_EQ(slurp(logs / "none" / "attempt_0" / "node0" / "stdout.log"), "spawned\n");
  EXPECT_EQ(slurp(logs / "none" / "attempt_0" / "node0" / "stderr.log"), "");
}

TEST(LaunchLogs, ALogDirPlrunCannotWriteToExitsTwoBeforeAnythingStarts) {
  ScratchDir dir;
  const fs::path file = dir.path() / "a-file";
  std::ofstream(file) << "x";
  struct Case {
    std::string log_dir, message;
  };
  const std::vector<Case> cases = {
      {(file / "logs").string(), "--log-dir '" + (file / "logs").string() + "' is not usable: cannot create it"},
      {file.string(), "--log-dir '" + file.string() + "' is not usable"},
      {"", "--log-dir is empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.log_dir);
    auto p = run_plrun(ppd_job(2, {"--log-dir", c.log_dir}, {"--out-dir", dir.str()}));
    EXPECT_EQ(p.exit_code, 2) << p.output;
    EXPECT_THAT(p.output, HasSubstr(c.message));
    EXPECT_FALSE(fs::exists(dir.path() / "rank-0.json")) << p.output;
  }
}
