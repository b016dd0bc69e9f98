// Every plrt shared library exports its C entry points and nothing else (cmake/plrt_exports.map,
// docs/abi.md): the runtime its C API, each plugin pl_plugin_entry_v1 and pl_plugin_abi_version.
// Each library's defined dynamic symbols are listed with binutils' nm; any name that does not
// start with pl_ fails the test, naming the library and the first few offenders.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace {

namespace fs = std::filesystem;

// The names of `lib`'s defined dynamic symbols.
std::vector<std::string> exported(const fs::path& lib) {
  plrt_test::ProcessSpec spec;
  spec.argv = {"nm", "-D", "--defined-only", "--format=posix", lib.string()};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(60);
  const plrt_test::ProcessResult r = plrt_test::run_job({spec}, w).processes.at(0);
  EXPECT_TRUE(r.ok()) << "nm " << lib << ": " << r.output;
  std::vector<std::string> names;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const auto space = line.find(' ');  // posix format: "name type value size"
    if (space != std::string::npos && space > 0) names.push_back(line.substr(0, space));
  }
  return names;
}

std::vector<fs::path> libraries() {
  std::vector<fs::path> libs{fs::path(PLRT_LIB_DIR) / "libplrt_runtime.so"};
  for (const auto& e : fs::directory_iterator(fs::path(PLRT_LIB_DIR) / "plrt" / "plugins"))
    if (e.path().extension() == ".so") libs.push_back(e.path());
  return libs;
}

TEST(Exports, EveryLibraryExportsItsCEntryPointsAndNothingElse) {
  const std::vector<fs::path> libs = libraries();
  ASSERT_GE(libs.size(), 10U) << "the runtime and the plugins were not found under " << PLRT_LIB_DIR;
  for (const fs::path& lib : libs) {
    SCOPED_TRACE(lib.filename().string());
    const std::vector<std::string> names = exported(lib);
    std::vector<std::string> other;
    bool entry = false;
    for (const auto& n : names) {
      if (n.rfind("pl_", 0) != 0) other.push_back(n);
      if (n == "pl_plugin_entry_v1" || n == "pl_runtime_create") entry = true;
    }
    EXPECT_TRUE(entry) << lib << " does not export its entry point";
    std::string shown;
    for (size_t i = 0; i < other.size() && i < 5; ++i) shown += "\n  " + other[i];
    EXPECT_TRUE(other.empty()) << lib << " exports " << other.size() << " symbol(s) besides its pl_* entry points"
                               << shown << "\n(link it with cmake/plrt_exports.map)";
  }
}

}  // namespace
