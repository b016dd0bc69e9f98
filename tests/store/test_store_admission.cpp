// The server's flood defences alone: the bound on connections without a handshake (admission.hpp:
// which connection is closed, per address and in all, and the limits derived from RLIMIT_NOFILE)
// and the rate-limited warnings (throttled_log.hpp), with the time given or a short period.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/asio/io_context.hpp>
#include <sstream>

#include "store/admission.hpp"
#include "store/throttled_log.hpp"

namespace {

using plrt::store::AdmissionLimits;
using plrt::store::Eviction;
using plrt::store::PendingConnections;
using plrt::store::Throttle;
using plrt::store::ThrottledWarning;
using namespace std::chrono_literals;

std::vector<uint64_t> ids(const std::vector<Eviction>& e, bool per_peer) {
  std::vector<uint64_t> out;
  for (const auto& x : e) {
    EXPECT_EQ(x.per_peer, per_peer) << "connection " << x.id;
    out.push_back(x.id);
  }
  return out;
}

TEST(StoreAdmission, LimitsFollowTheOpenFileLimit) {
  auto big = AdmissionLimits::for_open_file_limit(1 << 20);
  EXPECT_EQ(big.total, 512u);
  EXPECT_EQ(big.per_peer, 64u);
  auto usual = AdmissionLimits::for_open_file_limit(1024);
  EXPECT_EQ(usual.total, 256u);
  EXPECT_EQ(usual.per_peer, 64u);
  auto small = AdmissionLimits::for_open_file_limit(128);
  EXPECT_EQ(small.total, 32u);
  EXPECT_EQ(small.per_peer, 32u);
  auto tiny = AdmissionLimits::for_open_file_limit(10);
  EXPECT_EQ(tiny.total, 16u);
  EXPECT_EQ(tiny.per_peer, 16u);
}

TEST(StoreAdmission, OverThePerAddressLimitTheOldestFromThatAddressGoes) {
  PendingConnections p({3, 100});
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_TRUE(p.admit(id, "10.0.0.1").empty());
  EXPECT_TRUE(p.admit(10, "10.0.0.2").empty());  // another address has its own count
  EXPECT_EQ(ids(p.admit(4, "10.0.0.1"), true), std::vector<uint64_t>{1});
  EXPECT_EQ(p.from("10.0.0.1"), 3u);
  EXPECT_EQ(p.from("10.0.0.2"), 1u);
  p.forget(2);  // authenticated: no longer counted
  EXPECT_TRUE(p.admit(5, "10.0.0.1").empty());
  EXPECT_EQ(ids(p.admit(6, "10.0.0.1"), true), std::vector<uint64_t>{3});
  EXPECT_EQ(p.oldest(), std::optional<uint64_t>(10));
  EXPECT_EQ(p.size(), 4u);
}

TEST(StoreAdmission, OverTheTotalTheOldestOfAllGoes) {
  PendingConnections p({2, 4});
  EXPECT_TRUE(p.admit(1, "a").empty());
  EXPECT_TRUE(p.admit(2, "b").empty());
  EXPECT_TRUE(p.admit(3, "c").empty());
  EXPECT_TRUE(p.admit(4, "d").empty());
  EXPECT_EQ(ids(p.admit(5, "e"), false), std::vector<uint64_t>{1});
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p.from("a"), 0u);
  EXPECT_EQ(ids(p.admit(6, "e"), false), std::vector<uint64_t>{2});
  EXPECT_EQ(p.from("e"), 2u);
  // Both limits reached: closing the oldest from the address brings the total under its limit too.
  EXPECT_EQ(ids(p.admit(7, "e"), true), std::vector<uint64_t>{5});
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p.oldest(), std::optional<uint64_t>(3));
}

TEST(StoreAdmission, ForgetIsIdempotentAndOldestFollowsTheOrder) {
  PendingConnections p({64, 512});
  EXPECT_FALSE(p.oldest().has_value());
  p.admit(7, "x");
  p.admit(8, "y");
  p.forget(7);
  p.forget(7);
  p.forget(99);
  EXPECT_EQ(p.oldest(), std::optional<uint64_t>(8));
  p.forget(8);
  EXPECT_FALSE(p.oldest().has_value());
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.from("x"), 0u);
}

TEST(StoreThrottle, OneLinePerPeriodAndACountOfTheRest) {
  Throttle t(10s);
  auto t0 = Throttle::Clock::now();
  EXPECT_TRUE(t.allow(t0));  // the first is logged
  for (int i = 1; i <= 99; ++i) EXPECT_FALSE(t.allow(t0 + i * 100ms));
  EXPECT_EQ(t.counted(), 99u);
  EXPECT_EQ(t.period_end(), t0 + 10s);
  EXPECT_EQ(t.take(t0 + 10s), 99u);         // the summary line counts as the next period's line
  EXPECT_FALSE(t.allow(t0 + 10s + 100ms));  // a steady flood: still one line per period
  EXPECT_EQ(t.take(t0 + 20s), 1u);
  EXPECT_TRUE(t.allow(t0 + 31s));  // after a quiet period the first is logged at once again
  EXPECT_EQ(t.counted(), 0u);
}

TEST(StoreThrottle, WarningSummedUpWhenThePeriodEnds) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto log = std::make_shared<spdlog::logger>("throttle-test", sink);
  log->set_pattern("%v");
  boost::asio::io_context io;
  ThrottledWarning w(io, log, 200ms, [](uint64_t n) { return "and " + std::to_string(n) + " more"; });
  for (int i = 0; i < 5; ++i) w.warn("event " + std::to_string(i));
  EXPECT_EQ(out.str(), "event 0\n");
  auto start = std::chrono::steady_clock::now();
  io.run_for(1s);  // the summary timer fires, then nothing is left to run
  EXPECT_EQ(out.str(), "event 0\nand 4 more\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 900ms);
  w.warn("event 5");  // within the new period: counted, then flushed (the server's shutdown)
  w.flush();
  EXPECT_EQ(out.str(), "event 0\nand 4 more\nand 1 more\n");
}

}  // namespace
