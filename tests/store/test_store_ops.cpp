// Every store operation's semantics, through the SDK (pl::Store) and the C table.
#include <climits>
#include <random>

#include "store_test_support.hpp"

namespace {

using namespace store_test;
using ::testing::HasSubstr;

class StoreOps : public ::testing::Test {
 protected:
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
  pl::Store server{rt, server_options()};
  pl::Store client{rt, client_options(server.port())};
  std::string where() const { return "(store 127.0.0.1:" + std::to_string(server.port()) + ")"; }
};

TEST_F(StoreOps, SetThenGetFromAnotherConnection) {
  client.set("a", "1");
  EXPECT_EQ(server.get("a"), "1");
  server.set("a", "two");
  EXPECT_EQ(client.get("a"), "two");
}

TEST_F(StoreOps, GetWaitsForALaterSet) {
  auto start = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(150ms);
    server.set("late", "value");
  });
  EXPECT_EQ(client.get("late", 5000ms), "value");
  EXPECT_GE(ms_since(start), 140);
  setter.join();
}

TEST_F(StoreOps, GetTimesOutNamingKeyTimeoutAndStore) {
  auto start = Clock::now();
  std::string msg = error_of([&] { client.get("missing", 200ms); }, PL_ERR_TIMEOUT);
  auto took = ms_since(start);
  EXPECT_EQ(msg, "store get for 'missing' timed out after 200 ms " + where());
  EXPECT_GE(took, 190);
  EXPECT_LT(took, 3000);
  // The connection that waited is still good.
  client.set("after", "x");
  EXPECT_EQ(client.get("after"), "x");
}

TEST_F(StoreOps, ZeroTimeoutMeansTheStoresTimeout) {
  pl::Store quick{rt, client_options(server.port(), "job-secret", 300ms)};
  std::string msg = error_of([&] { quick.get("never"); }, PL_ERR_TIMEOUT);
  EXPECT_THAT(msg, HasSubstr("timed out after 300 ms"));
  msg = error_of([&] { quick.wait({"never"}); }, PL_ERR_TIMEOUT);
  EXPECT_THAT(msg, HasSubstr("timed out after 300 ms"));
}

TEST_F(StoreOps, WaitTimesOutNamingTheMissingKeys) {
  client.set("here", "1");
  std::string msg = error_of([&] { client.wait({"pg/default/nccl_id"}, 200ms); }, PL_ERR_TIMEOUT);
  EXPECT_EQ(msg, "store wait for 'pg/default/nccl_id' timed out after 200 ms " + where());
  msg = error_of([&] { client.wait({"here", "gone", "lost"}, 200ms); }, PL_ERR_TIMEOUT);
  EXPECT_EQ(msg, "store wait for 'here', 'gone', 'lost' timed out after 200 ms " + where() +
                     "; still missing: 'gone', 'lost'");
}

TEST_F(StoreOps, WaitReturnsOnlyWhenEveryKeyExists) {
  std::atomic<bool> second_set{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    server.set("k1", "x");
    std::this_thread::sleep_for(150ms);
    second_set = true;
    server.add("k2", 7);  // add creates the key, and wakes waiters too
  });
  client.wait({"k1", "k2"}, 5000ms);
  EXPECT_TRUE(second_set.load());
  setter.join();
  client.wait({"k1", "k2"}, 100ms);  // already there: returns at once
  client.wait({}, 100ms);            // nothing to wait for
}

TEST_F(StoreOps, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(client.add("c", 5), 5);
  EXPECT_EQ(server.add("c", -7), -2);
  EXPECT_EQ(client.get("c"), "-2");
  client.set("n", "40");
  EXPECT_EQ(client.add("n", 2), 42);
  EXPECT_EQ(client.add("zero", 0), 0);
  EXPECT_EQ(client.get("zero"), "0");
}

TEST_F(StoreOps, AddOnTextOrOverflowIsAnError) {
  client.set("text", "hello");
  std::string msg = error_of([&] { client.add("text", 1); }, PL_ERR_RUNTIME);
  EXPECT_THAT(msg, HasSubstr("the value of 'text' is not an integer: 'hello'"));
  client.set("big", std::to_string(LLONG_MAX));
  msg = error_of([&] { client.add("big", 1); }, PL_ERR_RUNTIME);
  EXPECT_THAT(msg, HasSubstr("overflows int64"));
  EXPECT_EQ(client.get("big"), std::to_string(LLONG_MAX));  // unchanged
  EXPECT_EQ(client.add("big", -1), LLONG_MAX - 1);          // and the connection still works
}

TEST_F(StoreOps, CompareSetFollowsTcpStore) {
  // Absent, expected empty: set.
  EXPECT_EQ(client.compare_set("cs", "", "first"), "first");
  EXPECT_EQ(client.get("cs"), "first");
  // Present, mismatch: unchanged, the current value comes back.
  EXPECT_EQ(client.compare_set("cs", "wrong", "second"), "first");
  EXPECT_EQ(client.get("cs"), "first");
  // Present, equal: swapped.
  EXPECT_EQ(client.compare_set("cs", "first", "second"), "second");
  EXPECT_EQ(client.get("cs"), "second");
  // Absent, expected not empty: nothing is set, and `expected` comes back (as TCPStore does).
  EXPECT_EQ(client.compare_set("absent", "guess", "new"), "guess");
  EXPECT_FALSE(client.check_keys({"absent"}));
  // Present with an empty value, expected empty: set.
  client.set("empty", "");
  EXPECT_EQ(client.compare_set("empty", "", "filled"), "filled");
  // An empty desired value is a value.
  EXPECT_EQ(client.compare_set("cs", "second", ""), "");
  EXPECT_TRUE(client.check_keys({"cs"}));
  EXPECT_EQ(client.get("cs"), "");
}

TEST_F(StoreOps, CompareSetWakesAWaiter) {
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    server.compare_set("elected", "", "rank3");
  });
  EXPECT_EQ(client.get("elected", 5000ms), "rank3");
  setter.join();
}

TEST_F(StoreOps, RemoveReportsWhetherTheKeyExisted) {
  client.set("r", "1");
  EXPECT_EQ(client.num_keys(), 1);
  EXPECT_TRUE(client.remove("r"));
  EXPECT_FALSE(client.remove("r"));
  EXPECT_FALSE(client.check_keys({"r"}));
  EXPECT_EQ(client.num_keys(), 0);
  error_of([&] { client.get("r", 100ms); }, PL_ERR_TIMEOUT);
}

TEST_F(StoreOps, CheckAndNumKeys) {
  EXPECT_TRUE(client.check_keys({}));
  EXPECT_EQ(client.num_keys(), 0);
  client.set("x", "1");
  client.add("y", 1);
  client.compare_set("z", "", "1");
  client.compare_set("not-created", "expected", "1");
  EXPECT_EQ(server.num_keys(), 3);
  EXPECT_TRUE(client.check_keys({"x", "y", "z"}));
  EXPECT_FALSE(client.check_keys({"x", "nope"}));
}

TEST_F(StoreOps, ValuesWithNulBytesAndEmptyValues) {
  std::string binary("a\0b\0\0c\xff", 7);
  client.set("bin", binary);
  EXPECT_EQ(server.get("bin"), binary);
  client.set("empty", "");
  EXPECT_TRUE(client.check_keys({"empty"}));
  EXPECT_EQ(server.get("empty"), "");
  EXPECT_EQ(client.compare_set("bin", binary, std::string("\0", 1)), std::string("\0", 1));
  std::string weird_key = "key with spaces/and/slashes:\t\xc3\xa9";
  client.set(weird_key, "v");
  EXPECT_EQ(server.get(weird_key), "v");
}

TEST_F(StoreOps, LargeValues) {
  std::string big(8 << 20, '\0');
  std::mt19937 gen(7);
  for (auto& c : big) c = static_cast<char>(gen());
  client.set("big", big);
  EXPECT_EQ(server.get("big"), big);
  EXPECT_EQ(client.compare_set("big", big, big.substr(1)), big.substr(1));
}

TEST_F(StoreOps, LimitsAreNamed) {
  std::string long_key(4097, 'k');
  std::string msg = error_of([&] { client.set(long_key, "v"); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("a key of 4097 bytes is longer than the limit of 4096"));
  client.set(std::string(4096, 'k'), "fits");
  std::string too_big((64 << 20) + 1, 'v');
  msg = error_of([&] { client.set("huge", too_big); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("store set for 'huge'"));
  EXPECT_THAT(msg, HasSubstr("67108864"));
  EXPECT_EQ(client.get(std::string(4096, 'k')), "fits");  // the connection survived
}

TEST_F(StoreOps, CTableChecksItsArguments) {
  const PL_StoreApi* api = rt.host()->store_api;
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->struct_size, sizeof(PL_StoreApi));
  auto expect_error = [&](PL_Error* e, PL_ErrorCode code, const std::string& text) {
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(pl_error_code(e), code);
    EXPECT_THAT(pl_error_message(e), HasSubstr(text));
    pl_error_destroy(e);
  };
  expect_error(api->set(nullptr, "k", "v", 1), PL_ERR_INVALID_ARGUMENT, "the store is NULL");
  expect_error(api->set(client.get(), nullptr, "v", 1), PL_ERR_INVALID_ARGUMENT, "the key is NULL");
  expect_error(api->set(client.get(), "k", nullptr, 3), PL_ERR_INVALID_ARGUMENT, "NULL with a size of 3");
  PL_Bytes old{0, nullptr, 0};
  expect_error(api->get(client.get(), "k", 100, &old), PL_ERR_VERSION, "PL_Bytes.struct_size 0");
  const char* keys[] = {"a", nullptr};
  int32_t all = 0;
  expect_error(api->check(client.get(), keys, 2, &all), PL_ERR_INVALID_ARGUMENT, "the key is NULL");
  expect_error(api->wait(client.get(), nullptr, 1, 100), PL_ERR_INVALID_ARGUMENT, "keys is NULL");

  // Values come back in memory that bytes_free releases; an empty value is not NULL.
  ASSERT_EQ(api->set(client.get(), "k", nullptr, 0), nullptr);
  PL_Bytes b{sizeof(PL_Bytes), nullptr, 0};
  ASSERT_EQ(api->get(client.get(), "k", 100, &b), nullptr);
  EXPECT_NE(b.data, nullptr);
  EXPECT_EQ(b.size, 0u);
  api->bytes_free(&b);
  EXPECT_EQ(b.data, nullptr);
  api->bytes_free(nullptr);
  int32_t removed = -1;
  ASSERT_EQ(api->remove(client.get(), "k", &removed), nullptr);
  EXPECT_EQ(removed, 1);
}

}  // namespace
