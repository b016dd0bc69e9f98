// The samples a third party copies, built as their READMEs say from an installed prefix alone (the
// sample folder is copied out of the source tree first), and run under the installed plrun:
// samples/strategy_plugin_c with find_package(plrt) and with the one-line gcc + pkg-config build,
// trained at 2 and 3 ranks; samples/embed_c the same two ways, run at 1 and 3 processes; the
// libtorch sample with find_package(plrt COMPONENTS torch), and plrt::torch built on its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "install_support.hpp"

namespace plrt_install_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class InstalledSamples : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = tmp_.path() / "prefix";
    ASSERT_TRUE(install_into(prefix_));
  }
  // samples/<name> copied to a folder outside the source tree.
  fs::path copy_sample(const std::string& name) {
    fs::path dst = tmp_.path() / name;
    fs::copy(fs::path(PLRT_SOURCE_DIR) / "samples" / name, dst, fs::copy_options::recursive);
    return dst;
  }
  EnvVars pkg_config_env() const { return {{"PKG_CONFIG_PATH", (prefix_ / "lib/pkgconfig").string()}}; }
  // plrun --strategy local_sgd (sync_every=2) --devices N -- plrt-mlp, the plugin on PL_PLUGIN_PATH.
  void train_local_sgd(const fs::path& plugin_dir, int devices) {
    std::vector<std::string> argv{
        (prefix_ / "bin/plrun").string(), "--strategy", "local_sgd", "--strategy-option", "sync_every=2", "--devices",
        std::to_string(devices),          "--"};
    auto mlp = mlp_args(prefix_ / "bin/plrt-mlp");
    argv.insert(argv.end(), mlp.begin(), mlp.end());
    argv.insert(argv.end(), {"--report", "report.json"});
    auto r = run(argv, {{"PL_PLUGIN_PATH", plugin_dir.string()}}, tmp_.path());
    ASSERT_TRUE(r.ok()) << "local_sgd at " << devices << " ranks: " << describe(r);
    EXPECT_THAT(r.output, Not(HasSubstr("warn"))) << r.output;
    EXPECT_TRUE(fs::exists(tmp_.path() / "report.json")) << r.output;
  }

  TempDir tmp_;
  fs::path prefix_;
};

TEST_F(InstalledSamples, StrategyPluginCWithFindPackageTrainsAtTwoAndThreeRanks) {
  fs::path src = copy_sample("strategy_plugin_c");
  ASSERT_TRUE(cmake_build(src, tmp_.path() / "build", prefix_.string()));
  ASSERT_TRUE(fs::exists(tmp_.path() / "build/libplrt_strategy_local_sgd.so"));
  train_local_sgd(tmp_.path() / "build", 2);
  train_local_sgd(tmp_.path() / "build", 3);
}

TEST_F(InstalledSamples, StrategyPluginCWithOneGccLineAndPkgConfig) {
  fs::path src = copy_sample("strategy_plugin_c");
  auto r = sh(std::string(C_COMPILER_PATH) +
                  " -std=c99 -Wall -Wextra -pedantic -shared -fPIC $(pkg-config --cflags plrt-plugin) local_sgd.c "
                  "-o libplrt_strategy_local_sgd.so",
              pkg_config_env(), src);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.output, "") << "the sample builds without a warning";
  train_local_sgd(src, 2);
}

// embed_c: its 1-process and 3-process runs print checked results on every rank.
void expect_embed_runs(const fs::path& prefix, const fs::path& program, const fs::path& cwd) {
  auto r = run({program.string()}, {}, cwd);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr("embed_c rank 0/1: allreduce sum [1 2 3 4] ok"));
  r = run({(prefix / "bin/plrun").string(), "--devices", "3", "--", program.string()}, {}, cwd);
  ASSERT_TRUE(r.ok()) << describe(r);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_THAT(r.output, HasSubstr("embed_c rank " + std::to_string(rank) + "/3: allreduce sum [6 12 18 24] ok"));
  EXPECT_THAT(r.output, HasSubstr("allgather [0 0] [1 1] [2 4] ok"));
}

TEST_F(InstalledSamples, EmbedCWithFindPackageRunsAloneAndUnderPlrun) {
  fs::path src = copy_sample("embed_c");
  ASSERT_TRUE(cmake_build(src, tmp_.path() / "build", prefix_.string()));
  expect_embed_runs(prefix_, tmp_.path() / "build/embed_c", tmp_.path());
}

TEST_F(InstalledSamples, EmbedCWithOneGccLineAndPkgConfig) {
  fs::path src = copy_sample("embed_c");
  auto r = sh(std::string(C_COMPILER_PATH) +
                  " -std=c99 -Wall -Wextra -pedantic embed.c $(pkg-config --cflags --libs plrt) "
                  "-Wl,-rpath,$(pkg-config --variable=libdir plrt) -o embed_c",
              pkg_config_env(), src);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.output, "") << "the sample builds without a warning";
  expect_embed_runs(prefix_, src / "embed_c", tmp_.path());
}

// samples/libtorch built out of tree against the installed SDK (find_package(plrt) and Torch), and
// trained by the installed plrun's ddp; its numbers against PyTorch DDP are tests/samples' job.
TEST_F(InstalledSamples, LibtorchWithFindPackageTrainsUnderPlrun) {
#ifndef PLRT_HAVE_TORCH
  GTEST_SKIP() << "libtorch-dev is not installed: samples/libtorch was not built (scripts/setup.sh installs it)";
#endif
  fs::path src = copy_sample("libtorch");
  ASSERT_TRUE(cmake_build(src, tmp_.path() / "build", prefix_.string()));
  auto r = run({(prefix_ / "bin/plrun").string(), "--strategy", "ddp", "--devices", "2", "--",
                (tmp_.path() / "build/plrt-libtorch").string(), "--steps", "5", "--batch-size", "8", "--warmup", "0",
                "--report", "report.json"},
               {}, tmp_.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_TRUE(fs::exists(tmp_.path() / "report.json")) << r.output;
}

// libtorch/ as a project of its own against plrt installed (what scripts/gpu-check does on a GPU
// machine, whose CUDA torch is not the one plrt was built with): plrt::torch, the sample and the
// tests' worker built from a copy of those folders, the sample trained by the installed plrun.
TEST_F(InstalledSamples, PlrtTorchBuiltOnItsOwnAgainstTheInstalledSdk) {
#ifndef PLRT_HAVE_TORCH
  GTEST_SKIP() << "libtorch-dev is not installed: plrt::torch was not built (scripts/setup.sh installs it)";
#endif
  const fs::path src = tmp_.path() / "src";
  for (const char* dir : {"libtorch", "samples/libtorch", "tests/libtorch"}) {
    fs::create_directories(src / dir);
    fs::copy(fs::path(PLRT_SOURCE_DIR) / dir, src / dir, fs::copy_options::recursive);
  }
  ASSERT_TRUE(cmake_build(src / "libtorch", tmp_.path() / "build", prefix_.string(), {"-DPLRT_TORCH_PROGRAMS=ON"}));
  EXPECT_TRUE(fs::exists(tmp_.path() / "build/libtorch_ddp_worker"));
  auto r = run({(prefix_ / "bin/plrun").string(), "--strategy", "ddp", "--devices", "2", "--",
                (tmp_.path() / "build/samples-libtorch/plrt-libtorch").string(), "--steps", "5", "--batch-size", "8",
                "--warmup", "0", "--report", "report.json"},
               {}, tmp_.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_TRUE(fs::exists(tmp_.path() / "report.json")) << r.output;
}

}  // namespace
}  // namespace plrt_install_test
