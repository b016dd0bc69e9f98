// Two runtimes in one process keep apart: their own search paths, loggers and instances.
#include <mutex>
#include <thread>

#include "test_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using ::testing::HasSubstr;

namespace {

using plrt_test::LogCapture;

pl::RuntimeOptions with_log(std::vector<std::string> dirs, LogCapture* cap, int rank) {
  auto o = isolated(std::move(dirs));
  o.log_level = "info";
  o.rank = rank;
  o.log_callback = &LogCapture::callback;
  o.log_user = cap;
  return o;
}

}  // namespace

TEST(TwoRuntimes, SeparateSearchPaths) {
  pl::Runtime a(isolated({PLRT_TEST_PLUGIN_DIR}));
  pl::Runtime b(isolated({PLRT_BUILD_PLUGIN_DIR}));
  EXPECT_EQ(a.find(PL_PLUGIN_STRATEGY, "independent_c").name(), "independent_c");
  error_of([&] { b.find(PL_PLUGIN_STRATEGY, "independent_c"); }, PL_ERR_NOT_FOUND);
  EXPECT_EQ(b.find(PL_PLUGIN_STRATEGY, "single_device").name(), "single_device");
  error_of([&] { a.find(PL_PLUGIN_STRATEGY, "single_device"); }, PL_ERR_NOT_FOUND);
}

TEST(TwoRuntimes, SeparateLoggersAndHostTables) {
  LogCapture cap_a, cap_b;
  pl::Runtime a(with_log({PLRT_TEST_PLUGIN_DIR}, &cap_a, 0));
  pl::Runtime b(with_log({PLRT_TEST_PLUGIN_DIR}, &cap_b, 1));
  EXPECT_NE(a.host(), b.host());
  EXPECT_NE(a.host()->ctx, b.host()->ctx);

  // The same plugin library, created through each runtime's host: each logs to its own runtime.
  auto* api_a = a.find(PL_PLUGIN_STRATEGY, "independent_c").api<PL_StrategyApi>();
  auto* api_b = b.find(PL_PLUGIN_STRATEGY, "independent_c").api<PL_StrategyApi>();
  EXPECT_EQ(api_a, api_b);  // one copy of the code, loaded once by the OS
  PL_StrategyConfig cfg{};
  cfg.struct_size = sizeof cfg;
  PL_Strategy* sa = nullptr;
  pl::check(a.host(), api_a->create(a.host(), &cfg, &sa));
  EXPECT_TRUE(cap_a.contains("[rank 0] [independent_c] created"));
  EXPECT_FALSE(cap_b.contains("created"));
  PL_Strategy* sb = nullptr;
  pl::check(b.host(), api_b->create(b.host(), &cfg, &sb));
  EXPECT_TRUE(cap_b.contains("[rank 1] [independent_c] created"));
  api_a->destroy(sa);
  api_b->destroy(sb);
}

TEST(TwoRuntimes, DestroyingOneLeavesTheOtherWorking) {
  pl::Runtime b(isolated({PLRT_BUILD_PLUGIN_DIR}));
  auto* cpu_b = b.find(PL_PLUGIN_ACCELERATOR, "cpu").api<PL_AcceleratorApi>();
  PL_Accelerator* acc_b = nullptr;
  pl::check(b.host(), cpu_b->create(b.host(), nullptr, &acc_b));
  {
    pl::Runtime a(isolated({PLRT_BUILD_PLUGIN_DIR}));
    auto* cpu_a = a.find(PL_PLUGIN_ACCELERATOR, "cpu").api<PL_AcceleratorApi>();
    PL_Accelerator* acc_a = nullptr;
    pl::check(a.host(), cpu_a->create(a.host(), nullptr, &acc_a));
    cpu_a->destroy(acc_a);
  }  // runtime a unloads its handle on the library
  float x[4] = {1, 2, 3, 4};
  PL_Tensor t{sizeof(PL_Tensor), x, PL_F32, {PL_DEVICE_CPU, 0}, 4, 1, {4}};
  pl::check(b.host(), cpu_b->scale(acc_b, &t, 2.0, nullptr));
  EXPECT_FLOAT_EQ(x[3], 8.0f);
  // Errors from b's instance are made by b's host and carry the plugin's message.
  PL_Tensor bad = t;
  bad.dtype = 99;
  auto msg = error_of([&] { pl::check(b.host(), cpu_b->scale(acc_b, &bad, 2.0, nullptr)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("dtype 99"));
  cpu_b->destroy(acc_b);
}

TEST(TwoRuntimes, ConcurrentUseFromThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR}));
      for (int k = 0; k < 20; ++k) {
        auto name = (i + k) % 2 ? "independent_c_half" : "cpu";
        auto kind = (i + k) % 2 ? PL_PLUGIN_STRATEGY : PL_PLUGIN_ACCELERATOR;
        if (!rt.find(kind, name).path.empty()) ok++;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 80);
}
