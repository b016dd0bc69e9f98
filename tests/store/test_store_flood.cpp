// A flood of idle, unauthenticated connections against a store server that runs out of
// descriptors (store_flood_server: a process of its own with a small RLIMIT_NOFILE): the job's
// clients must keep being served while the flood stays connected, the server must start accepting
// again once descriptors are free, and its warnings must be rate-limited (one line per 10 s, with
// a count), not one per accept attempt.
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "spawn.hpp"
#include "store_test_support.hpp"

namespace {

using namespace store_test;
using ::testing::HasSubstr;

const std::string kToken = "flood-token";
const char* kEvicted = "too many connections without a handshake";
const char* kAcceptFailed = "accept failed";

// The test opens more sockets than the usual soft limit (1024).
void raise_own_fd_limit() {
  rlimit rl{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = rl.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < 1400) GTEST_SKIP() << "the hard RLIMIT_NOFILE (" << rl.rlim_cur << ") is too small for a flood";
}

size_t lines_with(const std::string& output, const std::string& needle) {
  size_t n = 0;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// UBSan's vptr check opens a pipe (to see whether memory is readable) the first time it meets a
// type: in a process with no descriptor left it reports a false error and stops the process.  So
// the tests that exhaust the server's descriptors do not run in the sanitizer build (the bounded
// flood above them does).
#ifdef PLRT_TEST_UBSAN
#define SKIP_WHERE_UBSAN_NEEDS_DESCRIPTORS() GTEST_SKIP() << "UBSan's runtime needs descriptors of its own"
#else
#define SKIP_WHERE_UBSAN_NEEDS_DESCRIPTORS() (void)0
#endif

class FloodServer {
 public:
  FloodServer(int nofile, int free_fds) {
    char tmpl[] = "/tmp/plrt-store-flood-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    plrt_test::ProcessSpec spec;
    spec.argv = {STORE_FLOOD_SERVER_PATH, std::to_string(nofile), std::to_string(free_fds), dir_, kToken};
    spec.label = "store_flood_server";
    job_ = std::make_unique<plrt_test::Job>(std::vector<plrt_test::ProcessSpec>{spec});
    auto end = Clock::now() + 10s;
    while (Clock::now() < end && !std::filesystem::exists(dir_ + "/port")) std::this_thread::sleep_for(10ms);
    std::ifstream(dir_ + "/port") >> port;
  }
  ~FloodServer() { std::filesystem::remove_all(dir_); }

  // Frees the descriptors it had filled; returns once it has.
  void release() {
    std::ofstream(dir_ + "/release") << "\n";
    auto end = Clock::now() + 10s;
    while (Clock::now() < end && !std::filesystem::exists(dir_ + "/released")) std::this_thread::sleep_for(5ms);
  }
  // Stops the server; its exit status and log.
  plrt_test::ProcessResult stop() {
    std::ofstream(dir_ + "/stop") << "\n";
    plrt_test::WaitOptions w;
    w.deadline = 55s;
    return job_->wait(w).processes.at(0);
  }

  int port = 0;

 private:
  std::string dir_;
  std::unique_ptr<plrt_test::Job> job_;
};

std::vector<std::unique_ptr<RawSocket>> flood(int port, int n) {
  std::vector<std::unique_ptr<RawSocket>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::make_unique<RawSocket>(port));
    EXPECT_TRUE(out.back()->connected()) << "connection " << i << ": " << std::strerror(out.back()->connect_errno());
  }
  return out;
}

// A job's client connects (handshake), sets and gets; how long it took in ms.
int64_t serve_a_client(pl::Runtime& rt, int port, const std::string& key) {
  auto start = Clock::now();
  pl::Store client{rt, client_options(port, kToken, 5000ms)};
  client.set(key, "v");
  EXPECT_EQ(client.get(key, 2000ms), "v");
  return ms_since(start);
}

// 1,100 idle connections from 127.0.0.1, where the job's clients connect from too, against a server
// with 256 descriptors: the oldest pending connections are closed (at most 64 per address), so
// the server never runs out and a new client gets through within a few seconds.
TEST(StoreFlood, IdleConnectionsDoNotLockOutTheJobsClients) {
  raise_own_fd_limit();
  if (::testing::Test::IsSkipped()) return;
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
  FloodServer server(256, -1);
  ASSERT_GT(server.port, 0);
  auto start = Clock::now();
  auto sockets = flood(server.port, 1100);
  EXPECT_LT(serve_a_client(rt, server.port, "during-the-flood"), 3000) << "while 1,100 idle connections are open";
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(0, 3000 - ms_since(start))));
  EXPECT_LT(serve_a_client(rt, server.port, "still-serving"), 3000);
  auto result = server.stop();
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << result.output;
  EXPECT_THAT(result.output, HasSubstr("(connections without a handshake: 64 per address, 64 in all)"));
  // 3 s of flood: one warning line (the next would come after 10 s), not one per connection.
  EXPECT_EQ(lines_with(result.output, kEvicted), 1u) << result.output;
  EXPECT_THAT(result.output, HasSubstr("closed the oldest, from 127.0.0.1:"));
  // The rest, counted, in one line when the server stops.
  EXPECT_THAT(result.output,
              ::testing::ContainsRegex("closed [0-9]+ more connections that had not sent the handshake \\(limits"));
  EXPECT_EQ(lines_with(result.output, kAcceptFailed), 0u) << result.output;
}

// Descriptors scarce for other reasons (8 left): accept fails with EMFILE while the flood arrives;
// the server closes its oldest pending connection to free one, the client gets through, and the
// failures are reported in one line, not one per 100 ms.
TEST(StoreFlood, OutOfDescriptorsTheOldestPendingConnectionMakesRoom) {
  SKIP_WHERE_UBSAN_NEEDS_DESCRIPTORS();
  raise_own_fd_limit();
  if (::testing::Test::IsSkipped()) return;
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
  FloodServer server(256, 8);
  ASSERT_GT(server.port, 0);
  auto start = Clock::now();
  auto sockets = flood(server.port, 1100);
  EXPECT_LT(serve_a_client(rt, server.port, "scarce"), 3000);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(0, 3000 - ms_since(start))));
  EXPECT_LT(serve_a_client(rt, server.port, "still-scarce"), 3000);
  auto result = server.stop();
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << result.output;
  // The first failure at once, the others (one per connection of the flood, at most) in one line
  // when the server stops.
  EXPECT_EQ(lines_with(result.output, kAcceptFailed), 2u) << result.output;
  EXPECT_THAT(result.output, HasSubstr("accept failed: Too many open files; closed the oldest connection without a "
                                       "handshake to free one (from 127.0.0.1:"));
  EXPECT_THAT(result.output,
              ::testing::ContainsRegex("accept failed [0-9]+ more times \\(last: Too many open files\\)"));
}

// No descriptor left at all and no pending connection to close: each connection is accepted on
// the spare descriptor and closed at once (the listen queue does not fill, the loop does not spin),
// the failures are summed up in one line after 10 s, and once descriptors are free again the server
// accepts as before.
TEST(StoreFlood, NoDescriptorsLeftThenFreedAgain) {
  SKIP_WHERE_UBSAN_NEEDS_DESCRIPTORS();
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
  FloodServer server(256, 0);
  ASSERT_GT(server.port, 0);
  auto start = Clock::now();
  auto sockets = flood(server.port, 50);
  size_t left_open = 0;
  auto deadline = Clock::now() + 3s;
  for (auto& s : sockets)
    left_open += !s->closed_by_peer(
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()), 1ms));
  EXPECT_EQ(left_open, 0u) << "connections left in the listen queue after 3 s";
  // Past the 10 s period, so that the summary line is written.
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(0, 10500 - ms_since(start))));
  server.release();
  EXPECT_LT(serve_a_client(rt, server.port, "after"), 3000);
  auto result = server.stop();
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << result.output;
  EXPECT_THAT(result.output, HasSubstr("accept failed: Too many open files; closed the next connection at once"));
  EXPECT_THAT(result.output, HasSubstr("accept failed 49 more times (last: Too many open files)"));
  EXPECT_EQ(lines_with(result.output, kAcceptFailed), 2u) << result.output;
}

}  // namespace
