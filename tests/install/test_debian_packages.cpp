// The Debian packages (cpack -G DEB): plrt (runtime, plugins, plrun), plrt-dev (headers, SDK, CMake
// and pkg-config files) and plrt-cuda (the CUDA plugins, where CUDA was built).  The test makes them
// from this build, unpacks them into an empty root as dpkg would install them, and uses that root
// alone: plrun lists the plugins beside its runtime, a third-party plugin builds with pkg-config and
// with find_package, and a 2-process job trains with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "install_support.hpp"

namespace plrt_install_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string field(const fs::path& deb, const std::string& name) {
  auto r = run({"dpkg-deb", "-f", deb.string(), name});
  if (!r.ok()) return "<" + describe(r) + ">";
  std::string v = r.output;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

TEST(DebianPackages, UnpackIntoACleanRootAndTrainWithAThirdPartyPlugin) {
  if (run({"dpkg-deb", "--version"}).exit_code != 0) GTEST_SKIP() << "dpkg-deb is not installed";
  TempDir tmp;
  auto r = run({CPACK_COMMAND_PATH, "-G", "DEB", "--config", PLRT_BUILD_DIR "/CPackConfig.cmake", "-B",
                (tmp.path() / "debs").string()},
               {}, tmp.path(), std::chrono::seconds(300));
  ASSERT_TRUE(r.ok()) << describe(r);
  const std::string v = PLRT_VERSION_STRING;
  fs::path runtime = tmp.path() / "debs" / ("plrt_" + v + "_amd64.deb");
  fs::path dev = tmp.path() / "debs" / ("plrt-dev_" + v + "_amd64.deb");
  fs::path cuda = tmp.path() / "debs" / ("plrt-cuda_" + v + "_amd64.deb");
  ASSERT_TRUE(fs::exists(runtime)) << r.output;
  ASSERT_TRUE(fs::exists(dev)) << r.output;
#ifdef PLRT_HAVE_CUDA
  ASSERT_TRUE(fs::exists(cuda)) << r.output;
  EXPECT_EQ(field(cuda, "Depends"), "plrt (= " + v + ")");
#else
  EXPECT_FALSE(fs::exists(cuda));
#endif
  // plrt::torch: its own package, so that plrt-dev does not depend on libtorch
  fs::path torch = tmp.path() / "debs" / ("plrt-torch_" + v + "_amd64.deb");
#ifdef PLRT_HAVE_TORCH
  ASSERT_TRUE(fs::exists(torch)) << r.output;
  EXPECT_EQ(field(torch, "Depends"), "plrt-dev (= " + v + "), libtorch-dev");
  auto files = run({"dpkg-deb", "-c", torch.string()});
  EXPECT_THAT(files.output, HasSubstr("./usr/include/plrt/torch.hpp"));
  EXPECT_THAT(files.output, HasSubstr("libplrt_torch.a"));
  EXPECT_THAT(files.output, HasSubstr("plrtTorchTargets.cmake"));
#else
  EXPECT_FALSE(fs::exists(torch));
#endif
  // Dependencies: the runtime's from dpkg-shlibdeps (the Debian libraries it links), the headers'
  // on the runtime of the same version and on DLPack (plrt/sdk/dlpack.hpp includes it).
  EXPECT_THAT(field(runtime, "Depends"), HasSubstr("libgloo0"));
  EXPECT_THAT(field(runtime, "Depends"), HasSubstr("libopenblas0"));
  EXPECT_EQ(field(dev, "Depends"), "plrt (= " + v + "), libdlpack-dev");
  // The runtime package holds no CUDA plugin (they need CUDA: plrt-cuda), the dev package no library.
  r = run({"dpkg-deb", "-c", runtime.string()});
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr("./usr/lib/plrt/plugins/libplrt_strategy_ddp.so"));
  EXPECT_THAT(r.output, Not(HasSubstr("cuda")));
  EXPECT_THAT(r.output, Not(HasSubstr("nccl")));

  fs::path root = tmp.path() / "root";
  for (const auto& deb : {runtime, dev}) {
    r = run({"dpkg-deb", "-x", deb.string(), root.string()});
    ASSERT_TRUE(r.ok()) << describe(r);
  }
  fs::path usr = root / "usr";
  r = run({(usr / "bin/plrun").string(), "--list-plugins"}, {{"PL_LOG_LEVEL", "warn"}}, tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr((usr / "lib/plrt/plugins/libplrt_strategy_ddp.so").string()));

  // A third-party plugin, built the two ways its README shows, from the unpacked root alone.
  fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  std::stringstream code;
  code << std::ifstream(PLRT_SOURCE_DIR "/plugins/strategies/single_device/single_device.c").rdbuf();
  std::string c = code.str();
  size_t at = c.find("\"single_device\",");
  ASSERT_NE(at, std::string::npos);
  c.replace(at, 16, "\"from_deb\",");
  std::ofstream(src / "from_deb.c") << c;
  EnvVars pc{{"PKG_CONFIG_PATH", (usr / "lib/pkgconfig").string()}};
  r = sh(std::string(C_COMPILER_PATH) +
             " -std=c99 -Wall -Wextra -shared -fPIC $(pkg-config --cflags plrt-plugin) from_deb.c "
             "-o libplrt_strategy_from_deb.so",
         pc, src);
  ASSERT_TRUE(r.ok()) << describe(r);
  std::ofstream(src / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.16)\nproject(from_deb C)\n"
                                           "find_package(plrt 0.1 REQUIRED)\n"
                                           "plrt_add_plugin(strategy from_deb SOURCES from_deb.c)\n";
  ASSERT_TRUE(cmake_build(src, tmp.path() / "build", usr.string()));
  ASSERT_TRUE(fs::exists(tmp.path() / "build/libplrt_strategy_from_deb.so"));

  auto mlp = mlp_args(usr / "bin/plrt-mlp");
  std::vector<std::string> argv{(usr / "bin/plrun").string(), "--strategy", "from_deb", "--devices", "1", "--"};
  argv.insert(argv.end(), mlp.begin(), mlp.end());
  r = run(argv, {{"PL_PLUGIN_PATH", src.string()}}, tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  // And the packaged ddp on 2 processes.
  argv = {(usr / "bin/plrun").string(), "--strategy", "ddp", "--devices", "2", "--"};
  argv.insert(argv.end(), mlp.begin(), mlp.end());
  r = run(argv, {}, tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
}

}  // namespace
}  // namespace plrt_install_test
