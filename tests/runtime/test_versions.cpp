// Versions: the runtime library's (pl_runtime_version) against the headers' (PLRT_VERSION) and
// the project's; the plugin ABI's; a plugin built for a newer minor ABI loads with a warning.
#include <plrt/version.h>

#include <cstring>

#include "test_support.hpp"

using plrt_test::isolated;
using plrt_test::LogCapture;
using ::testing::HasSubstr;

TEST(Versions, TheRuntimeReportsTheProjectVersion) {
  EXPECT_STREQ(pl_runtime_version(), PLRT_EXPECTED_VERSION);
  EXPECT_STREQ(PLRT_VERSION, PLRT_EXPECTED_VERSION);
  const std::string parts = std::to_string(PLRT_VERSION_MAJOR) + "." + std::to_string(PLRT_VERSION_MINOR) + "." +
                            std::to_string(PLRT_VERSION_PATCH);
  EXPECT_EQ(parts, PLRT_EXPECTED_VERSION);
  EXPECT_EQ(PLRT_VERSION_NUMBER, PLRT_VERSION_MAJOR * 10000 + PLRT_VERSION_MINOR * 100 + PLRT_VERSION_PATCH);
}

TEST(Versions, TheRuntimeReportsItsPluginAbi) {
  int32_t major = -1, minor = -1;
  pl_runtime_abi_version(&major, &minor);
  EXPECT_EQ(major, PL_ABI_MAJOR);
  EXPECT_EQ(minor, PL_ABI_MINOR);
  pl_runtime_abi_version(nullptr, &minor);  // either pointer may be NULL
  pl_runtime_abi_version(&major, nullptr);
  EXPECT_EQ(major, PL_ABI_MAJOR);
}

TEST(Versions, APluginOfANewerMinorLoadsWithAWarning) {
  LogCapture log;
  pl::RuntimeOptions o = isolated({PLRT_TEST_FUTURE_MINOR_DIR, PLRT_TEST_PLUGIN_DIR});
  o.log_callback = LogCapture::callback;
  o.log_user = &log;
  pl::Runtime rt(o);
  auto ref = rt.find(PL_PLUGIN_STRATEGY, "future_minor");
  EXPECT_EQ(ref.plugin->abi_minor, PL_ABI_MINOR + 2);
  EXPECT_EQ(ref.api<PL_StrategyApi>()->struct_size, sizeof(PL_StrategyApi) + 2 * sizeof(void*));
  const std::string ours = std::to_string(PL_ABI_MAJOR) + "." + std::to_string(PL_ABI_MINOR);
  const std::string theirs = std::to_string(PL_ABI_MAJOR) + "." + std::to_string(PL_ABI_MINOR + 2);
  const std::string line = log.wait_for({"libplrt_strategy_future_minor.so"}, std::chrono::milliseconds(0));
  EXPECT_THAT(line, HasSubstr("[warning]"));
  EXPECT_THAT(line, HasSubstr("(strategy 'future_minor') was built for plugin ABI " + theirs +
                              ", newer than this runtime's " + ours));
  EXPECT_THAT(line, HasSubstr("upgrade plrt to a runtime of ABI " + theirs +
                              " or later, or rebuild the plugin against "
                              "this runtime's headers (ABI " +
                              ours + ")"));
  // Once per file: a second look-up and a listing reuse the loaded plugin.
  rt.find(PL_PLUGIN_STRATEGY, "future_minor");
  rt.list(nullptr);
  EXPECT_EQ(log.count("was built for plugin ABI"), 1u) << log.all();
  // A plugin of this runtime's minor (or an older one) gets no such line.
  rt.find(PL_PLUGIN_STRATEGY, "independent_c");
  EXPECT_EQ(log.count("was built for plugin ABI"), 1u) << log.all();
}
