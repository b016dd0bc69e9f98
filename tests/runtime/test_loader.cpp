// Finding plugins by name, by alias, by path, through PL_PLUGIN_PATH; listing; unknown names.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "test_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using ::testing::HasSubstr;

TEST(Loader, FindsTheCpuAcceleratorInTheBuildTree) {
  pl::RuntimeOptions o;
  o.use_env_dirs = false;  // only the folder beside the runtime library (build/<preset>/lib/plrt/plugins)
  o.log_level = "warn";
  pl::Runtime rt(o);
  auto cpu = rt.find(PL_PLUGIN_ACCELERATOR, "cpu");
  EXPECT_EQ(cpu.name(), "cpu");
  EXPECT_EQ(cpu.kind(), PL_PLUGIN_ACCELERATOR);
  EXPECT_THAT(cpu.path, HasSubstr("libplrt_accelerator_cpu.so"));
  auto* api = cpu.api<PL_AcceleratorApi>();
  EXPECT_EQ(api->device_type, PL_DEVICE_CPU);
  EXPECT_TRUE(api->flags & PL_ACCEL_DEVICES_ARE_PROCESSES);
}

TEST(Loader, CStrategyLoadsAndAnswers) {
  pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR}));
  auto ref = rt.find(PL_PLUGIN_STRATEGY, "independent_c");
  EXPECT_EQ(ref.requested_name, "independent_c");
  EXPECT_STREQ(ref.plugin->version, "1.2.3");
  EXPECT_TRUE(ref.presets.empty());
  auto* api = ref.api<PL_StrategyApi>();

  PL_LaunchInfo info{};
  info.struct_size = sizeof info;
  pl::check(api->launch_info(&ref.preset_list, &info));
  EXPECT_EQ(info.mode, PL_LAUNCH_PROCESS_PER_DEVICE);

  // Create it with an option, hand it parameters, run one step through it.
  PL_Option opt{sizeof(PL_Option), "grad_scale", "0.25"};
  PL_StrategyConfig cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.world_size = 1;
  cfg.options = {sizeof(PL_OptionList), &opt, 1};
  PL_Strategy* s = nullptr;
  pl::check(rt.host(), api->create(rt.host(), &cfg, &s));
  ASSERT_NE(s, nullptr);
  float w[3] = {1, 2, 3}, g[3] = {0, 0, 0};
  PL_Parameter p{};
  p.struct_size = sizeof p;
  p.name = "layer.weight";
  p.value = {sizeof(PL_Tensor), w, PL_F32, {PL_DEVICE_CPU, 0}, 3, 1, {3}};
  p.grad = {sizeof(PL_Tensor), g, PL_F32, {PL_DEVICE_CPU, 0}, 3, 1, {3}};
  p.requires_grad = 1;
  pl::check(rt.host(), api->setup(s, &p, 1));
  struct Ctx {
    int calls = 0;
  } ctx;
  PL_ReplicaStepFn fn{
      sizeof(PL_ReplicaStepFn), &ctx,
      [](void* user, int32_t replica, int32_t n, PL_Device, PL_Parameter* params, size_t np) -> PL_Error* {
        static_cast<Ctx*>(user)->calls++;
        EXPECT_EQ(replica, 0);
        EXPECT_EQ(n, 1);
        for (size_t i = 0; i < np; ++i)
          for (int64_t j = 0; j < params[i].grad.numel; ++j) static_cast<float*>(params[i].grad.data)[j] = 4.0f;
        return nullptr;
      }};
  pl::check(rt.host(), api->run_step(s, &fn));
  pl::check(rt.host(), api->after_backward(s));
  EXPECT_EQ(ctx.calls, 1);
  EXPECT_FLOAT_EQ(g[0], 1.0f);  // 4 * 0.25
  EXPECT_FLOAT_EQ(g[2], 1.0f);
  pl::check(rt.host(), api->teardown(s));
  api->destroy(s);
}

TEST(Loader, CStrategyErrorsComeBackThroughTheHost) {
  pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR}));
  auto* api = rt.find(PL_PLUGIN_STRATEGY, "independent_c").api<PL_StrategyApi>();
  PL_Option opt{sizeof(PL_Option), "grad_scale", "lots"};
  PL_StrategyConfig cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.options = {sizeof(PL_OptionList), &opt, 1};
  PL_Strategy* s = nullptr;
  auto msg = error_of([&] { pl::check(rt.host(), api->create(rt.host(), &cfg, &s)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("grad_scale='lots'"));
}

TEST(Loader, FindsByAliasWithPresets) {
  pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR}));
  auto ref = rt.find(PL_PLUGIN_STRATEGY, "independent_c_half");
  EXPECT_EQ(ref.name(), "independent_c");
  EXPECT_EQ(ref.requested_name, "independent_c_half");
  ASSERT_EQ(ref.presets.size(), 1u);
  EXPECT_EQ(ref.presets[0].first, "grad_scale");
  EXPECT_EQ(ref.presets[0].second, "0.5");
}

TEST(Loader, FindsByExplicitPath) {
  pl::Runtime rt(isolated({}));
  std::string path = std::string(PLRT_TEST_PLUGIN_DIR) + "/libplrt_strategy_independent_c.so";
  auto ref = rt.find(PL_PLUGIN_STRATEGY, path);
  EXPECT_EQ(ref.name(), "independent_c");
}

TEST(Loader, ExplicitPathOfTheWrongKind) {
  pl::Runtime rt(isolated({}));
  std::string path = std::string(PLRT_TEST_PLUGIN_DIR) + "/libplrt_strategy_independent_c.so";
  auto msg = error_of([&] { rt.find(PL_PLUGIN_ACCELERATOR, path); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("is a strategy plugin, not a accelerator plugin"));
}

TEST(Loader, MissingFile) {
  pl::Runtime rt(isolated({}));
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, "/nonexistent/libplrt_strategy_x.so"); }, PL_ERR_NOT_FOUND);
  EXPECT_THAT(msg, HasSubstr("/nonexistent/libplrt_strategy_x.so"));
  EXPECT_THAT(msg, HasSubstr("no such file"));
}

TEST(Loader, UnknownNameListsAvailableAndClosest) {
  pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR}));
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, "independent_cc"); }, PL_ERR_NOT_FOUND);
  EXPECT_THAT(msg, HasSubstr("no strategy plugin named 'independent_cc'"));
  EXPECT_THAT(msg, HasSubstr("available: independent_c, independent_c_half"));
  EXPECT_THAT(msg, HasSubstr("closest: 'independent_c'"));
  EXPECT_THAT(msg, HasSubstr(PLRT_TEST_PLUGIN_DIR));
}

TEST(Loader, UnknownNameWithNothingInstalled) {
  namespace fs = std::filesystem;
  fs::path empty = fs::temp_directory_path() / ("plrt-empty-plugins-" + std::to_string(::getpid()));
  fs::create_directories(empty);
  pl::Runtime rt(isolated({empty.string()}));
  auto msg = error_of([&] { rt.find(PL_PLUGIN_ACCELERATOR, "tpu"); }, PL_ERR_NOT_FOUND);
  EXPECT_THAT(msg, HasSubstr("no accelerator plugin named 'tpu'; none are installed"));
  EXPECT_THAT(msg, HasSubstr(empty.string() + " (plugin_dirs)"));
  fs::remove_all(empty);
}

TEST(Loader, InvalidNameIsRefused) {
  pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR}));
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, "DDP!"); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("'DDP!' is not a valid strategy name"));
}

TEST(Loader, PluginPathEnvironmentVariable) {
  ::setenv("PL_PLUGIN_PATH", "/nonexistent-a:" PLRT_TEST_PLUGIN_DIR, 1);
  pl::RuntimeOptions o;
  o.use_default_dirs = false;
  o.log_level = "warn";
  pl::Runtime rt(o);
  ::unsetenv("PL_PLUGIN_PATH");
  EXPECT_EQ(rt.find(PL_PLUGIN_STRATEGY, "independent_c").name(), "independent_c");
  // Without the variable, a fresh runtime does not see the folder.
  pl::Runtime rt2(o);
  error_of([&] { rt2.find(PL_PLUGIN_STRATEGY, "independent_c"); }, PL_ERR_NOT_FOUND);
}

TEST(Loader, FirstDirectoryWins) {
  // The same file in two folders: the earlier folder's copy is the one loaded.
  namespace fs = std::filesystem;
  fs::path copy_dir = fs::temp_directory_path() / ("plrt-first-wins-" + std::to_string(::getpid()));
  fs::create_directories(copy_dir);
  fs::copy_file(fs::path(PLRT_TEST_PLUGIN_DIR) / "libplrt_strategy_independent_c.so",
                copy_dir / "libplrt_strategy_independent_c.so", fs::copy_options::overwrite_existing);
  {
    pl::Runtime copy_first(isolated({copy_dir.string(), PLRT_TEST_PLUGIN_DIR}));
    EXPECT_THAT(copy_first.find(PL_PLUGIN_STRATEGY, "independent_c").path, HasSubstr(copy_dir.string()));
    pl::Runtime original_first(isolated({PLRT_TEST_PLUGIN_DIR, copy_dir.string()}));
    EXPECT_THAT(original_first.find(PL_PLUGIN_STRATEGY, "independent_c").path, HasSubstr("test-plugins/good"));
  }
  fs::remove_all(copy_dir);
}

TEST(Loader, ListsPluginsAndAliases) {
  pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR}));
  std::vector<std::string> problems;
  auto list = rt.list(&problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  auto has = [&](const std::string& name, const std::string& alias_of) {
    for (const auto& p : list)
      if (p.name == name && p.alias_of == alias_of) return true;
    return false;
  };
  EXPECT_TRUE(has("cpu", ""));
  EXPECT_TRUE(has("single_device", ""));
  EXPECT_TRUE(has("independent_c", ""));
  EXPECT_TRUE(has("independent_c_half", "independent_c"));
  // Sorted by kind, then name.
  for (size_t i = 1; i < list.size(); ++i)
    EXPECT_TRUE(list[i - 1].kind < list[i].kind ||
                (list[i - 1].kind == list[i].kind && list[i - 1].name <= list[i].name));
}

TEST(Loader, BadLogLevelIsAClearError) {
  pl::RuntimeOptions o = isolated({});
  o.log_level = "loud";
  auto msg = error_of([&] { pl::Runtime rt(o); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("'loud' is not a log level"));
  EXPECT_THAT(msg, HasSubstr("trace, debug, info, warn, error, critical, off"));
}

TEST(Loader, LogLevelFromEnvironment) {
  ::setenv("PL_LOG_LEVEL", "shouty", 1);
  pl::RuntimeOptions o = isolated({});
  o.log_level.reset();
  auto msg = error_of([&] { pl::Runtime rt(o); }, PL_ERR_INVALID_ARGUMENT);
  ::unsetenv("PL_LOG_LEVEL");
  EXPECT_THAT(msg, HasSubstr("PL_LOG_LEVEL='shouty'"));
}
