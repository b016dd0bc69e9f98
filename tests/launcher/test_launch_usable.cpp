// plrun --devices usable:N launching a job on a simulated machine (PL_CUDA_DEVICE_TABLE): plrun
// finds the free devices once and every worker gets the explicit list in PL_TRAINER_DEVICES.
// Needs the cuda plugin (built where nvcc is); no GPU is touched.
#include <gmock/gmock.h>

#include "launcher_support.hpp"

using namespace launcher_test;
using ::testing::HasSubstr;

#ifdef PLRT_HAVE_CUDA
namespace {

// Four devices: 1 busy with another process's memory, 2 held in exclusive mode.
void write_table(const ScratchDir& dir) {
  std::ofstream(dir.path() / "table.json") << R"({"devices": [
    {"name": "GPU A"},
    {"name": "GPU B", "processes": [{"pid": 4242, "used_bytes": 4294967296}]},
    {"name": "GPU C", "compute_mode": "exclusive_process", "context_ok": false,
     "context_error": "cudaErrorDevicesUnavailable"},
    {"name": "GPU D"}]})";
}

std::vector<std::string> usable_job(const ScratchDir& dir, const std::string& devices) {
  return {kPlrun,       "--plugin-path", PLRT_TEST_PLUGIN_DIR,
          "--strategy", "independent_c", "--accelerator",
          "cuda",       "--devices",     devices,
          "--",         kWorker,         "--out-dir",
          dir.str()};
}

}  // namespace

TEST(LaunchUsable, WorkersGetTheResolvedList) {
  ScratchDir dir;
  write_table(dir);
  const plrt_test::EnvVars env = {{"PL_CUDA_DEVICE_TABLE", (dir.path() / "table.json").string()}};
  auto p = run_plrun(usable_job(dir, "usable:2"), env);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  for (const char* who : {"rank-0", "rank-1"}) {
    auto j = report(dir, who);
    EXPECT_EQ(j["env"].value("PL_TRAINER_DEVICES", "<unset>"), "[0, 3]") << who;
    EXPECT_EQ(j["env"].value("WORLD_SIZE", "<unset>"), "2") << who;
  }
}

TEST(LaunchUsable, TooFewFreeNamesTheBusyOnesAndStartsNothing) {
  ScratchDir dir;
  write_table(dir);
  const plrt_test::EnvVars env = {{"PL_CUDA_DEVICE_TABLE", (dir.path() / "table.json").string()}};
  auto p = run_plrun(usable_job(dir, "usable:3"), env);
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_THAT(p.output, HasSubstr("devices='usable:3': you requested 3 usable devices but only 2"));
  EXPECT_THAT(p.output, HasSubstr("1 'GPU B' (busy: 4.0 GiB used by other processes"));
  EXPECT_THAT(p.output, HasSubstr("2 'GPU C' (exclusive mode, held by another process)"));
  EXPECT_FALSE(fs::exists(dir.path() / "rank-0.json"));
}
#endif
