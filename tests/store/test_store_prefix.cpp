// The store's key prefix (PL_TcpStoreOptions.key_prefix, $PL_STORE_PREFIX: each round of a plrun
// job has its own keys) and PL_STORE_JOB_ENDED_KEY (a get or wait stops waiting, naming the process
// that ended, once the launcher recorded it).
#include <future>

#include "store_test_support.hpp"

namespace {

using namespace store_test;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class StorePrefix : public ::testing::Test {
 protected:
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
  pl::Store server{rt, with_prefix(server_options(), "")};

  pl::Store client(const std::string& prefix, std::chrono::milliseconds timeout = 5000ms) {
    return pl::Store{rt, with_prefix(client_options(server.port(), "job-secret", timeout), prefix)};
  }
  static pl::StoreOptions with_prefix(pl::StoreOptions o, std::optional<std::string> prefix) {
    o.key_prefix = std::move(prefix);
    return o;
  }
};

TEST_F(StorePrefix, EachPrefixHasItsOwnKeys) {
  auto a = client("plrt/round_0/"), b = client("plrt/round_1/");
  a.set("k", "from round 0");
  b.set("k", "from round 1");
  EXPECT_EQ(a.get("k"), "from round 0");
  EXPECT_EQ(b.get("k"), "from round 1");
  EXPECT_EQ(server.get("plrt/round_0/k"), "from round 0");  // as sent
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_TRUE(a.check_keys({"k", "n"}));
  EXPECT_FALSE(a.check_keys({"only-in-b"}));
  b.set("only-in-b", "x");
  EXPECT_FALSE(a.check_keys({"only-in-b"}));
  EXPECT_EQ(a.compare_set("k", "from round 0", "new"), "new");
  EXPECT_EQ(b.get("k"), "from round 1");
  EXPECT_TRUE(a.remove("k"));
  EXPECT_EQ(b.get("k"), "from round 1");
  EXPECT_EQ(server.num_keys(), 4);  // every key of the store (round_0/k was removed)
}

TEST_F(StorePrefix, ErrorsNameTheKeyAsTheCallerGaveIt) {
  auto a = client("plrt/round_3/");
  try {
    a.wait({"x", "y"}, 100ms);
    FAIL() << "no timeout";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_TIMEOUT);
    EXPECT_THAT(e.what(), StartsWith("store wait for 'x', 'y' timed out after 100 ms"));
    EXPECT_THAT(e.what(), HasSubstr("still missing: 'x', 'y'"));
  }
}

TEST_F(StorePrefix, TheEnvironmentGivesTheDefaultAndAnExplicitPrefixWins) {
  plrt_test::ScopedEnv env("PL_STORE_PREFIX", "plrt/round_7/");
  auto from_env = client("");  // an explicit "": no prefix
  from_env.set("plain", "1");
  EXPECT_EQ(server.get("plain"), "1");
  pl::Store defaulted{rt, with_prefix(client_options(server.port()), std::nullopt)};
  defaulted.set("k", "2");
  EXPECT_EQ(server.get("plrt/round_7/k"), "2");
}

TEST_F(StorePrefix, APrefixOverHalfTheKeyLimitIsRefused) {
  try {
    client(std::string(3000, 'p'));
    FAIL() << "accepted";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("the store's key prefix (PL_TcpStoreOptions.key_prefix) has 3000 bytes; the "
                                    "limit is 2048"));
  }
}

TEST_F(StorePrefix, AWaitStopsWithinSecondsOnceTheJobEndedKeyExists) {
  auto waiter = client("plrt/round_0/", 30000ms);
  auto other_round = client("plrt/round_1/");
  auto launcher = client("");
  const auto start = Clock::now();
  auto waiting = std::async(std::launch::async, [&] { waiter.get("never", 30000ms); });
  auto waiting_many = std::async(std::launch::async, [&] { waiter.wait({"never", "either"}, 30000ms); });
  std::this_thread::sleep_for(300ms);
  // Another round's end is not this round's.
  other_round.set(PL_STORE_JOB_ENDED_KEY, "rank 9 of another round exited with code 0");
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(waiting.wait_for(0ms), std::future_status::timeout);
  launcher.set(std::string("plrt/round_0/") + PL_STORE_JOB_ENDED_KEY, "rank 1 (pid 77, node 0) exited with code 0");
  for (auto* f : {&waiting, &waiting_many}) {
    ASSERT_EQ(f->wait_for(5s), std::future_status::ready);
    try {
      f->get();
      ADD_FAILURE() << "no error";
    } catch (const pl::Error& e) {
      EXPECT_EQ(e.code(), PL_ERR_RUNTIME);
      EXPECT_THAT(e.what(), HasSubstr("stopped waiting: rank 1 (pid 77, node 0) exited with code 0 (recorded by the "
                                      "launcher in 'plrt/job_ended'"));
    }
  }
  EXPECT_LT(ms_since(start), 5000);
}

TEST_F(StorePrefix, ALongGetStillSucceedsAndTimesOutNamingItsWholeTimeout) {
  auto a = client("r/");
  auto later = std::async(std::launch::async, [&] { return a.get("later", 10000ms); });
  std::this_thread::sleep_for(1300ms);  // past the first slice
  a.set("later", "v");
  EXPECT_EQ(later.get(), "v");
  const auto start = Clock::now();
  try {
    a.get("never", 2500ms);
    FAIL() << "no timeout";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_TIMEOUT);
    EXPECT_THAT(e.what(), StartsWith("store get for 'never' timed out after 2500 ms"));
  }
  EXPECT_GE(ms_since(start), 2400);
  EXPECT_LT(ms_since(start), 4500);
}

}  // namespace
