// The user's strategy options in job resolution (PL_JobRequest.strategy_options): they follow the
// alias's presets and override them, reach the strategy's launch_info, and every plrt strategy
// there refuses an unknown key or a bad value, naming it and what is valid, before any work.
#include "test_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

pl::Runtime make_runtime() { return pl::Runtime(isolated({PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR})); }

pl::JobRequest request(const std::string& strategy, int devices, Options options) {
  pl::JobRequest r;
  r.accelerator = "cpu";
  r.devices = devices;
  r.strategy = strategy;
  r.strategy_options = std::move(options);
  return r;
}

}  // namespace

TEST(JobStrategyOptions, FollowThePresetsOverrideThemAndReachLaunchInfo) {
  auto rt = make_runtime();
  // independent_c_half presets grad_scale=0.5; independent_c's launch_info reads "launch".
  auto c = rt.resolve(request("independent_c_half", 2, {{"launch", "spawn"}, {"grad_scale", "0.25"}}));
  EXPECT_THAT(c.strategy_options, ElementsAre(Pair("grad_scale", "0.25"), Pair("launch", "spawn")));
  EXPECT_EQ(c.launch_mode, PL_LAUNCH_SPAWN);
  // Within the user's options too, a later entry overrides an earlier one.
  c = rt.resolve(request("independent_c", 2, {{"launch", "spawn"}, {"launch", "single_process"}}));
  EXPECT_THAT(c.strategy_options, ElementsAre(Pair("launch", "single_process")));
  EXPECT_EQ(c.launch_mode, PL_LAUNCH_SINGLE_PROCESS);
  // Without any, the presets alone, as before.
  c = rt.resolve(request("independent_c_half", 1, {}));
  EXPECT_THAT(c.strategy_options, ElementsAre(Pair("grad_scale", "0.5")));
}

TEST(JobStrategyOptions, ValidOptionsOfEachFamilyResolve) {
  auto rt = make_runtime();
  const Options ddp = {
      {"bucket_cap_mb", "10"}, {"first_bucket_cap_mb", "0.5"}, {"broadcast_buffers", "off"}, {"pg.probe_ms", "500"}};
  for (const char* s : {"ddp", "ddp_spawn"}) {
    auto c = rt.resolve(request(s, 2, ddp));
    EXPECT_EQ(c.strategy_options, ddp) << s;
  }
  auto c = rt.resolve(request("ddp2", 2, {{"bucket_cap_mb", "4"}, {"pg.probe_ms", "100"}}));
  EXPECT_THAT(c.strategy_options, ElementsAre(Pair("bucket_cap_mb", "4"), Pair("pg.probe_ms", "100")));
  EXPECT_TRUE(rt.resolve(request("dp", 2, {})).strategy_options.empty());
}

struct BadCase {
  std::string strategy;
  int devices;
  Options options;
  std::vector<std::string> says;  // each in the message
};

TEST(JobStrategyOptions, EveryFamilyRefusesUnknownKeysAndBadValuesNamingTheValidOnes) {
  const std::string ddp_keys = "valid options: bucket_cap_mb, first_bucket_cap_mb, broadcast_buffers, pg.<name>";
  const std::vector<BadCase> cases = {
      {"ddp", 2, {{"bucket_cap_mb", "1"}, {"bogus", "1"}}, {"ddp: unknown option 'bogus'", ddp_keys}},
      {"ddp", 2, {{"bucket_cap_mb", "abc"}}, {"bucket_cap_mb='abc' is not valid", "a number of MiB > 0"}},
      {"ddp", 2, {{"first_bucket_cap_mb", "0"}}, {"first_bucket_cap_mb='0' is not valid"}},
      {"ddp", 2, {{"broadcast_buffers", "maybe"}}, {"broadcast_buffers='maybe' is not valid", "use true or false"}},
      {"ddp", 2, {{"pg.", "1"}}, {"option 'pg.' names no process-group option"}},
      {"ddp", 2, {{"bucket_cap_mb", "abc"}, {"bucket_cap_mb", "5"}}, {"bucket_cap_mb='abc'"}},  // each is checked
      {"ddp_spawn", 2, {{"bucket_cap_mb", "-1"}}, {"ddp_spawn: option bucket_cap_mb='-1' is not valid"}},
      {"ddp_spawn", 2, {{"stage", "1"}}, {"ddp_spawn: unknown option 'stage'", ddp_keys}},
      {"dp", 2, {{"bucket_cap_mb", "1"}}, {"dp: unknown option 'bucket_cap_mb'", "valid options: none"}},
      {"ddp2",
       2,
       {{"broadcast_buffers", "true"}},
       {"ddp2: unknown option 'broadcast_buffers'", "bucket_cap_mb, pg.<name>"}},
      {"ddp2", 2, {{"bucket_cap_mb", "abc"}}, {"ddp2: option bucket_cap_mb='abc' is not valid"}},
      {"single_device", 1, {{"x", "1"}}, {"single_device: unknown option 'x'", "valid options: none"}},
      {"auto", 1, {{"bucket_cap_mb", "1"}}, {"strategy 'single_device'", "unknown option 'bucket_cap_mb'"}},
  };
  auto rt = make_runtime();
  for (const auto& k : cases) {
    SCOPED_TRACE(k.strategy + " " + k.options.back().first + "=" + k.options.back().second);
    auto msg = error_of([&] { rt.resolve(request(k.strategy, k.devices, k.options)); }, PL_ERR_INVALID_ARGUMENT);
    for (const auto& s : k.says) EXPECT_THAT(msg, HasSubstr(s));
  }
}

TEST(JobStrategyOptions, TheRequestsEntriesAreChecked) {
  auto rt = make_runtime();
  EXPECT_THAT(error_of(
                  [&] {
                    rt.resolve(request("independent_c", 1, {{"", "v"}}));
                  },
                  PL_ERR_INVALID_ARGUMENT),
              HasSubstr("strategy_options[0] (value 'v') has an empty key"));
  PL_Option items[] = {{sizeof(PL_Option), "launch", nullptr}};
  PL_JobRequest r{};
  r.struct_size = sizeof r;
  r.strategy = "independent_c";
  r.accelerator = "cpu";
  r.num_nodes = 1;
  r.assume_device_count = -1;
  r.strategy_options = {sizeof(PL_OptionList), items, 1};
  PL_JobConfig* c = nullptr;
  PL_Error* e = pl_runtime_resolve_job(rt.get(), &r, &c);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(pl_error_code(e), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(pl_error_message(e), HasSubstr("strategy_options[0] has a NULL key or value"));
  pl_error_destroy(e);
  r.strategy_options = {sizeof(PL_OptionList), nullptr, 3};
  e = pl_runtime_resolve_job(rt.get(), &r, &c);
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(pl_error_message(e), HasSubstr("strategy_options.items is NULL for 3 options"));
  pl_error_destroy(e);
  // A request of before the field: it is never read.
  r.struct_size = PL_STRUCT_SIZE(PL_JobRequest, assume_device_count);
  ASSERT_EQ(pl_runtime_resolve_job(rt.get(), &r, &c), nullptr);
  EXPECT_EQ(c->strategy_options.count, 0u);
  pl_job_config_destroy(c);
}

TEST(JobStrategyOptions, APluginThatDoesNotCheckInLaunchInfoLeavesItToCreate) {
  // independent_c (a third-party plugin) checks its options at create only: resolution passes them.
  auto rt = make_runtime();
  auto c = rt.resolve(request("independent_c", 1, {{"bogus", "1"}}));
  EXPECT_THAT(c.strategy_options, ElementsAre(Pair("bogus", "1")));
}

TEST(JobStrategyOptions, LaunchInfoErrorsOutliveTheRuntimeThatFirstLoadedThePlugin) {
  // launch_info reports through the error_new its plugin's entry kept: with the first runtime gone,
  // the second (which loaded the same library again) still gets a whole error.
  auto first = std::make_unique<pl::Runtime>(isolated({PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR}));
  first->resolve(request("ddp", 2, {}));
  auto second = make_runtime();
  second.resolve(request("ddp", 2, {}));
  first.reset();
  EXPECT_THAT(error_of(
                  [&] {
                    second.resolve(request("ddp", 2, {{"bogus", "1"}}));
                  },
                  PL_ERR_INVALID_ARGUMENT),
              HasSubstr("ddp: unknown option 'bogus'"));
}
