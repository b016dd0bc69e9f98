// Many clients at once, and one store shared by threads while one of them is blocked in a wait.
#include <algorithm>
#include <atomic>
#include <future>
#include <numeric>

#include "store_test_support.hpp"

namespace {

using namespace store_test;
using ::testing::HasSubstr;

class StoreConcurrency : public ::testing::Test {
 protected:
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
  pl::Store server{rt, server_options()};
};

TEST_F(StoreConcurrency, SixtyFourClientsAddWithoutLosingAnUpdate) {
  constexpr int kClients = 64, kAdds = 1000;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        pl::Store c{rt, client_options(server.port(), "job-secret", 20000ms)};
        std::string own = "client/" + std::to_string(i);
        c.set(own + "/name", "client " + std::to_string(i));
        seen[i].reserve(kAdds);
        for (int n = 0; n < kAdds; ++n) {
          seen[i].push_back(c.add("shared", 1));
          if (n % 10 == 0) c.add(own + "/count", 10);
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) ASSERT_EQ(errors[i], "") << "client " << i;

  EXPECT_EQ(server.get("shared"), std::to_string(kClients * kAdds));
  // Every value from 1 to 64 000 was handed out exactly once: no update was lost or doubled.
  std::vector<int64_t> all;
  for (auto& v : seen) {
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));  // one client's own adds are ordered
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kClients * kAdds);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);
  for (int i = 0; i < kClients; ++i) {
    std::string own = "client/" + std::to_string(i);
    EXPECT_EQ(server.get(own + "/name"), "client " + std::to_string(i));
    EXPECT_EQ(server.get(own + "/count"), std::to_string(kAdds));
  }
  EXPECT_EQ(server.num_keys(), 1 + 2 * kClients);
}

TEST_F(StoreConcurrency, OneStoreServesOtherThreadsWhileOneWaits) {
  pl::Store shared{rt, client_options(server.port())};
  std::atomic<bool> released{false};
  auto waiter = std::async(std::launch::async, [&] {
    shared.wait({"release"}, 20000ms);
    return released.load();
  });
  std::this_thread::sleep_for(50ms);  // the waiter is blocked in its wait now

  constexpr int kThreads = 8, kOps = 200;
  auto start = Clock::now();
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      try {
        for (int n = 0; n < kOps; ++n) {
          std::string key = "w" + std::to_string(t) + "/" + std::to_string(n % 10);
          shared.set(key, std::to_string(n));
          if (shared.get(key, 1000ms) != std::to_string(n)) throw std::runtime_error("wrong value for " + key);
          shared.add("ops", 1);
          if (!shared.check_keys({key})) throw std::runtime_error("missing " + key);
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_LT(ms_since(start), 15000);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  EXPECT_EQ(shared.get("ops"), std::to_string(kThreads * kOps));

  // The waiter was blocked the whole time, and returns once its key is set.
  EXPECT_EQ(waiter.wait_for(0ms), std::future_status::timeout);
  released = true;
  server.set("release", "go");
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(waiter.get());
}

TEST_F(StoreConcurrency, OneSetWakesEveryWaiter) {
  pl::Store shared{rt, client_options(server.port())};
  std::vector<std::future<std::string>> waiters;
  for (int i = 0; i < 16; ++i)
    waiters.push_back(std::async(std::launch::async, [&] { return shared.get("barrier", 10000ms); }));
  std::this_thread::sleep_for(100ms);
  server.set("barrier", "open");
  for (auto& w : waiters) {
    ASSERT_EQ(w.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(w.get(), "open");
  }
}

TEST_F(StoreConcurrency, TimeoutsInOneThreadDoNotDisturbAnother) {
  pl::Store shared{rt, client_options(server.port())};
  auto timing_out = std::async(
      std::launch::async, [&] { return error_of([&] { shared.wait({"nobody-sets-this"}, 300ms); }, PL_ERR_TIMEOUT); });
  auto served = std::async(std::launch::async, [&] { return shared.get("soon", 5000ms); });
  std::this_thread::sleep_for(500ms);
  server.set("soon", "here");
  ASSERT_EQ(served.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(served.get(), "here");
  ASSERT_EQ(timing_out.wait_for(5s), std::future_status::ready);
  EXPECT_THAT(timing_out.get(), HasSubstr("store wait for 'nobody-sets-this' timed out after 300 ms"));
}

}  // namespace
