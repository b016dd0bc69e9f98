// plrt as another project uses it: installed with `cmake --install build --prefix P`, then found
// with find_package(plrt) or pkg-config, from P alone.  The installed runtime must find its plugins
// beside itself wherever the tree is moved, and nothing installed may name the build or source tree.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "install_support.hpp"

namespace plrt_install_test {
namespace {

using ::testing::HasSubstr;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(InstalledTree, NamesNeitherTheBuildNorTheSourceTree) {
  TempDir tmp;
  fs::path prefix = tmp.path() / "prefix";
  ASSERT_TRUE(install_into(prefix));
  for (const char* needed :
       {"bin/plrun", "lib/libplrt_runtime.so", "lib/libplrt_sdk.a", "include/plrt/pl_abi.h", "include/plrt/runtime.h",
        "include/plrt/sdk/trainer.hpp", "lib/cmake/plrt/plrtConfig.cmake", "lib/cmake/plrt/plrtConfigVersion.cmake",
        "lib/cmake/plrt/plrtPluginHelpers.cmake", "lib/pkgconfig/plrt.pc", "lib/pkgconfig/plrt-plugin.pc",
        "lib/plrt/plugins/libplrt_strategy_ddp.so"})
    EXPECT_TRUE(fs::exists(prefix / needed)) << needed << " is not installed";
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(prefix)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    std::string content = read_file(entry.path());
    EXPECT_EQ(content.find(PLRT_BUILD_DIR), std::string::npos)
        << entry.path() << " names the build tree " << PLRT_BUILD_DIR;
    EXPECT_EQ(content.find(PLRT_SOURCE_DIR "/"), std::string::npos)
        << entry.path() << " names the source tree " << PLRT_SOURCE_DIR;
  }
  EXPECT_GT(files, 20u);
}

TEST(InstalledTree, FindsItsPluginsBesideItselfWhereverItIsMoved) {
  TempDir tmp;
  ASSERT_TRUE(install_into(tmp.path() / "first"));
  fs::path prefix = tmp.path() / "moved";
  fs::rename(tmp.path() / "first", prefix);
  auto r = run({(prefix / "bin/plrun").string(), "--list-plugins", "--json"}, {{"PL_LOG_LEVEL", "warn"}}, tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  auto listing = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  std::set<std::string> names;
  std::vector<std::string> elsewhere;
  for (const auto& p : listing.at("plugins")) {
    names.insert(p.at("kind").get<std::string>() + "/" + p.at("name").get<std::string>());
    std::string file = p.at("file").get<std::string>();
    if (file.rfind((prefix / "lib/plrt/plugins/").string(), 0) != 0) elsewhere.push_back(file);
  }
  EXPECT_TRUE(elsewhere.empty()) << elsewhere.size() << " plugins are not in the moved tree's plugin folder, e.g. "
                                 << elsewhere.front();
  for (const char* n : {"accelerator/cpu", "process_group/gloo", "strategy/ddp", "strategy/single_device"})
    EXPECT_TRUE(names.count(n)) << n << " was not found beside the moved runtime:\n" << r.output;
}

// find_package(plrt) gives plrt::plugin_api, plrt::runtime, plrt::sdk and plrt_add_plugin(); the
// plugin it builds is found by name through PL_PLUGIN_PATH and runs a real job under plrun.
TEST(InstalledTree, CMakePackageBuildsAPluginThatPlrunRuns) {
  TempDir tmp;
  fs::path prefix = tmp.path() / "prefix";
  ASSERT_TRUE(install_into(prefix));
  fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  // plrt's own C strategy, renamed: the name a plugin declares must match its file's.
  std::string code = read_file(PLRT_SOURCE_DIR "/plugins/strategies/single_device/single_device.c");
  size_t at = code.find("\"single_device\",");
  ASSERT_NE(at, std::string::npos);
  code.replace(at, 16, "\"my_single\",");
  std::ofstream(src / "mine.c") << code;
  std::ofstream(src / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.16)\n"
                                           "project(third_party C)\n"
                                           "find_package(plrt 0.1 REQUIRED)\n"
                                           "plrt_add_plugin(strategy my_single SOURCES mine.c)\n";
  ASSERT_TRUE(cmake_build(src, tmp.path() / "build", prefix.string()));
  ASSERT_TRUE(fs::exists(tmp.path() / "build/libplrt_strategy_my_single.so"));
  auto mlp = mlp_args(prefix / "bin/plrt-mlp");
  std::vector<std::string> argv{(prefix / "bin/plrun").string(), "--strategy", "my_single", "--devices", "1", "--"};
  argv.insert(argv.end(), mlp.begin(), mlp.end());
  auto r = run(argv, {{"PL_PLUGIN_PATH", (tmp.path() / "build").string()}}, tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr("my_single"));
}

TEST(InstalledTree, PluginHelperRejectsABadKindOrName) {
  TempDir tmp;
  fs::path prefix = tmp.path() / "prefix";
  ASSERT_TRUE(install_into(prefix));
  for (auto [call, expected] : std::vector<std::pair<std::string, std::string>>{
           {"plrt_add_plugin(strategie x SOURCES a.c)", "kind 'strategie' is not one of"},
           {"plrt_add_plugin(strategy My.Name SOURCES a.c)", "name 'My.Name' is not valid"},
           {"plrt_add_plugin(strategy x)", "no SOURCES given"}}) {
    fs::path src = tmp.path() / "bad";
    fs::remove_all(src);
    fs::create_directories(src);
    std::ofstream(src / "a.c") << "int x;\n";
    std::ofstream(src / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.16)\nproject(bad C)\n"
                                             "find_package(plrt 0.1 REQUIRED)\n"
                                          << call << "\n";
    auto r = run(
        {CMAKE_COMMAND_PATH, "-S", src.string(), "-B", (src / "b").string(), "-DCMAKE_PREFIX_PATH=" + prefix.string()});
    EXPECT_FALSE(r.ok()) << call;
    EXPECT_THAT(r.output, HasSubstr(expected)) << call;
  }
}

TEST(InstalledTree, AskingForAnotherVersionFailsAtConfigure) {
  TempDir tmp;
  fs::path prefix = tmp.path() / "prefix";
  ASSERT_TRUE(install_into(prefix));
  fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  std::ofstream(src / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.16)\nproject(v NONE)\n"
                                           "find_package(plrt 7.0 REQUIRED)\n";
  auto r = run(
      {CMAKE_COMMAND_PATH, "-S", src.string(), "-B", (src / "b").string(), "-DCMAKE_PREFIX_PATH=" + prefix.string()});
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.output, HasSubstr("requested version \"7.0\""));
  EXPECT_THAT(r.output, HasSubstr("plrtConfig.cmake, version: " PLRT_VERSION_STRING));
}

// pkg-config: plrt (the runtime's C API) and plrt-plugin (the plugin headers), relocatable.
TEST(InstalledTree, PkgConfigFilesPointIntoTheMovedPrefix) {
  TempDir tmp;
  ASSERT_TRUE(install_into(tmp.path() / "first"));
  fs::path prefix = tmp.path() / "moved";
  fs::rename(tmp.path() / "first", prefix);
  EnvVars env{{"PKG_CONFIG_PATH", (prefix / "lib/pkgconfig").string()}};
  auto r =
      sh("pkg-config --modversion plrt plrt-plugin && pkg-config --cflags --libs plrt && "
         "pkg-config --cflags plrt-plugin && pkg-config --variable=plugindir plrt",
         env);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr(PLRT_VERSION_STRING "\n" PLRT_VERSION_STRING "\n"));
  EXPECT_THAT(r.output, HasSubstr("-lplrt_runtime"));
  EXPECT_THAT(r.output, HasSubstr((prefix / "lib/pkgconfig").string()));
  // A one-line C build of a host with the flags pkg-config gives, run against the moved runtime.
  std::ofstream(tmp.path() / "host.c")
      << "#include <plrt/runtime.h>\n#include <stdio.h>\n"
         "int main(void) {\n"
         "  PL_Runtime* rt = NULL;\n"
         "  PL_Error* err = pl_runtime_create(NULL, &rt);\n"
         "  if (err) { fprintf(stderr, \"%s\\n\", pl_error_message(err)); return 1; }\n"
         "  pl_runtime_destroy(rt);\n  puts(\"host ok\");\n  return 0;\n}\n";
  r = sh(std::string(C_COMPILER_PATH) +
             " -std=c99 -Wall -Wextra -pedantic host.c $(pkg-config --cflags --libs plrt) "
             "-Wl,-rpath,$(pkg-config --variable=libdir plrt) -o host && ./host",
         env, tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr("host ok"));
}

// docs/trainer.md's "Training a model" example, as written there, built against the installed SDK with
// find_package(plrt) and trained on 2 processes by the installed plrun.
TEST(InstalledTree, ReadmeTrainerExampleBuildsAndTrains) {
  std::string readme = read_file(PLRT_SOURCE_DIR "/docs/trainer.md");
  size_t section = readme.find("## Training a model");
  ASSERT_NE(section, std::string::npos);
  size_t begin = readme.find("```cpp\n", section);
  ASSERT_NE(begin, std::string::npos);
  begin += 7;
  size_t end = readme.find("```", begin);
  ASSERT_NE(end, std::string::npos);
  TempDir tmp;
  fs::path prefix = tmp.path() / "prefix";
  ASSERT_TRUE(install_into(prefix));
  fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  std::ofstream(src / "main.cpp") << readme.substr(begin, end - begin);
  std::ofstream(src / "CMakeLists.txt") << "cmake_minimum_required(VERSION 3.16)\n"
                                           "project(readme_example CXX)\n"
                                           "find_package(plrt 0.1 REQUIRED)\n"
                                           "add_executable(train main.cpp)\n"
                                           "target_compile_features(train PRIVATE cxx_std_20)\n"
                                           "target_link_libraries(train PRIVATE plrt::sdk)\n";
  ASSERT_TRUE(cmake_build(src, tmp.path() / "build", prefix.string()));
  auto r = run({(prefix / "bin/plrun").string(), "--devices", "2", "--", (tmp.path() / "build/train").string()}, {},
               tmp.path());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_TRUE(fs::exists(tmp.path() / "lightning_logs/version_0/metrics.csv")) << r.output;
}

}  // namespace
}  // namespace plrt_install_test
