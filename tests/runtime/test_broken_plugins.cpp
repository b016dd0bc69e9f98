// Every way a plugin file can be broken gives an error naming the file and the reason.
#include <filesystem>
#include <fstream>

#include "test_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using ::testing::HasSubstr;

namespace {

std::string broken_dir(const std::string& variant) { return std::string(PLRT_TEST_BROKEN_DIR) + "/" + variant; }

std::string load_error(const std::string& variant, PL_ErrorCode code) {
  pl::Runtime rt(isolated({broken_dir(variant)}));
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, variant); }, code);
  EXPECT_THAT(msg, HasSubstr("libplrt_strategy_" + variant + ".so")) << "the error names the file";
  return msg;
}

}  // namespace

TEST(BrokenPlugins, NotASharedLibrary) {
  auto dir = std::filesystem::temp_directory_path() / ("plrt-garbage-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "libplrt_strategy_garbage.so") << "this is not an ELF file\n";
  pl::Runtime rt(isolated({dir.string()}));
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, "garbage"); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("libplrt_strategy_garbage.so"));
  EXPECT_THAT(msg, HasSubstr("not a loadable shared library"));
  std::filesystem::remove_all(dir);
}

TEST(BrokenPlugins, NoEntrySymbol) {
  auto msg = load_error("no_entry", PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("no entry symbol pl_plugin_entry_v1"));
}

TEST(BrokenPlugins, NewerMajorAbi) {
  auto msg = load_error("newer_major", PL_ERR_VERSION);
  EXPECT_THAT(msg, HasSubstr("built for plrt plugin ABI 2.3"));
  EXPECT_THAT(msg, HasSubstr("newer than this runtime's major 1"));
}

TEST(BrokenPlugins, TableSmallerThanRequired) {
  auto msg = load_error("small_table", PL_ERR_VERSION);
  EXPECT_THAT(msg, HasSubstr("PL_StrategyApi table is 16 bytes, smaller than"));
}

TEST(BrokenPlugins, NameInsideDiffersFromTheFile) {
  auto msg = load_error("wrong_name", PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("named for strategy 'wrong_name' but the plugin inside declares strategy 'othername'"));
}

TEST(BrokenPlugins, EntryRefusesTheHost) {
  auto msg = load_error("refuses_host", PL_ERR_VERSION);
  EXPECT_THAT(msg, HasSubstr("the plugin refused the host: this plugin needs a host with feature X"));
}

TEST(BrokenPlugins, RequiredEntryIsNull) {
  auto msg = load_error("null_required", PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("PL_StrategyApi.create is NULL but required"));
}

TEST(BrokenPlugins, ListingReportsThemAsProblemsAndKeepsTheRest) {
  std::vector<std::string> dirs = {PLRT_TEST_PLUGIN_DIR};
  for (auto v : {"no_entry", "newer_major", "small_table", "wrong_name", "refuses_host", "null_required"})
    dirs.push_back(broken_dir(v));
  pl::Runtime rt(isolated(dirs));
  std::vector<std::string> problems;
  auto list = rt.list(&problems);
  EXPECT_EQ(problems.size(), 6u);
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list.front().name, "independent_c");
  // An unknown name's error mentions the files that failed, so a broken install is visible.
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, "ddp"); }, PL_ERR_NOT_FOUND);
  EXPECT_THAT(msg, HasSubstr("Files that failed to load"));
}
