// Serving and connecting: ports, retries, job tokens, and option resolution (with the environment).
#include <cstdint>
#include <future>

#include "store_test_support.hpp"

namespace {

using namespace store_test;
using ::testing::HasSubstr;

class StoreConnect : public ::testing::Test {
 protected:
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
};

TEST_F(StoreConnect, PortZeroPicksAFreePort) {
  pl::Store a{rt, server_options()};
  pl::Store b{rt, server_options()};
  EXPECT_GT(a.port(), 0);
  EXPECT_GT(b.port(), 0);
  EXPECT_NE(a.port(), b.port());
  pl::Store client{rt, client_options(a.port())};
  EXPECT_EQ(client.port(), a.port());
  client.set("k", "v");
  EXPECT_EQ(a.get("k"), "v");
  EXPECT_FALSE(b.check_keys({"k"}));  // two servers, two maps
}

TEST_F(StoreConnect, APortInUseIsNamed) {
  pl::Store a{rt, server_options()};
  auto o = server_options();
  o.port = a.port();
  std::string msg = error_of([&] { pl::Store b(rt, o); }, PL_ERR_RUNTIME);
  EXPECT_THAT(msg, HasSubstr("cannot serve the store on 127.0.0.1:" + std::to_string(a.port())));
  EXPECT_THAT(msg, HasSubstr("in use"));
}

TEST_F(StoreConnect, NothingListeningFailsWithinTheTimeout) {
  int port = free_port();
  auto start = Clock::now();
  std::string msg = error_of([&] { pl::Store c(rt, client_options(port, "t", 300ms)); }, PL_ERR_RUNTIME);
  auto took = ms_since(start);
  EXPECT_THAT(msg, HasSubstr("could not connect to the store at 127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(msg, HasSubstr("(tried for "));
  EXPECT_THAT(msg, HasSubstr("Connection refused"));
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 2000);
}

TEST_F(StoreConnect, AClientStartedBeforeTheServerConnectsByRetrying) {
  int port = free_port();
  auto client = std::async(std::launch::async, [&] {
    auto c = std::make_unique<pl::Store>(rt, client_options(port, "job-secret", 10000ms));
    return c;
  });
  std::this_thread::sleep_for(300ms);
  auto o = server_options();
  o.port = port;
  pl::Store server{rt, o};
  ASSERT_EQ(client.wait_for(8s), std::future_status::ready);
  auto c = client.get();
  c->set("hello", "world");
  EXPECT_EQ(server.get("hello"), "world");
}

TEST_F(StoreConnect, BindsOnlyTheAddressGiven) {
  pl::Store server{rt, server_options()};       // 127.0.0.1 only
  RawSocket other(server.port(), "127.0.0.2");  // also loopback, but another address
  EXPECT_FALSE(other.connected());
  EXPECT_EQ(other.connect_errno(), ECONNREFUSED);
  RawSocket same(server.port(), "127.0.0.1");
  EXPECT_TRUE(same.connected());
}

TEST_F(StoreConnect, AllInterfacesOnlyWhenAskedLiterally) {
  auto o = server_options();
  o.host = "0.0.0.0";
  pl::Store server{rt, o};  // connects to itself through the loopback
  server.set("k", "v");
  RawSocket other(server.port(), "127.0.0.2");
  EXPECT_TRUE(other.connected());
  ASSERT_TRUE(other.handshake("job-secret"));
}

TEST_F(StoreConnect, HugeTimeoutsAreClampedNotOverflowed) {
  pl::Store server{rt, server_options()};
  auto waiter =
      std::async(std::launch::async, [&] { return server.get("later", std::chrono::milliseconds(INT64_MAX)); });
  std::this_thread::sleep_for(50ms);
  server.set("later", "x");
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), "x");
}

TEST_F(StoreConnect, HostNamesAndIpv6) {
  auto o = server_options();
  o.host = "localhost";
  pl::Store by_name{rt, o};
  auto c = client_options(by_name.port());
  c.host = "localhost";
  pl::Store client{rt, c};
  client.set("k", "v");
  EXPECT_EQ(by_name.get("k"), "v");

  o.host = "::1";
  try {
    pl::Store v6{rt, o};
    c.host = "::1";
    c.port = v6.port();
    pl::Store client6{rt, c};
    client6.set("k6", "v6");
    EXPECT_EQ(v6.get("k6"), "v6");
  } catch (const pl::Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
}

TEST_F(StoreConnect, AWrongJobTokenIsRefusedAndLogged) {
  pl::Store server{rt, server_options("right-token")};
  auto start = Clock::now();
  std::string msg = error_of([&] { pl::Store bad(rt, client_options(server.port(), "wrong-token")); }, PL_ERR_RUNTIME);
  EXPECT_THAT(msg, HasSubstr("the store at 127.0.0.1:" + std::to_string(server.port()) + " refused the job token"));
  EXPECT_THAT(msg, HasSubstr("check PL_JOB_TOKEN"));
  EXPECT_LT(ms_since(start), 2000);  // a refusal is final: no retries until the timeout
  std::string line = log.wait_for({"refused a store connection from 127.0.0.1:", ": wrong job token"});
  EXPECT_FALSE(line.empty()) << log.all();
  EXPECT_THAT(line, HasSubstr("[warning]"));
  // A token that is a prefix of the right one is wrong too.
  error_of([&] { pl::Store bad(rt, client_options(server.port(), "right")); }, PL_ERR_RUNTIME);
  // The server keeps serving the right token.
  pl::Store good{rt, client_options(server.port(), "right-token")};
  good.set("k", "v");
  EXPECT_EQ(server.get("k"), "v");
}

TEST_F(StoreConnect, TheTokenComesFromPlJobTokenByDefault) {
  ScopedEnv token("PL_JOB_TOKEN", "from-the-environment");
  auto o = server_options();
  o.token.reset();
  pl::Store server{rt, o};
  auto c = client_options(server.port());
  c.token.reset();
  pl::Store client{rt, c};
  client.set("k", "v");
  EXPECT_EQ(server.get("k"), "v");
  error_of([&] { pl::Store other(rt, client_options(server.port(), "another")); }, PL_ERR_RUNTIME);
  EXPECT_EQ(log.count("unauthenticated"), 0u);
}

TEST_F(StoreConnect, NoTokenWorksWithOneWarning) {
  ScopedEnv token("PL_JOB_TOKEN", std::nullopt);
  auto o = server_options();
  o.token.reset();
  pl::Store server{rt, o};
  EXPECT_EQ(log.count("is unauthenticated"), 1u) << log.all();
  EXPECT_EQ(log.count("127.0.0.1:" + std::to_string(server.port()) + " is unauthenticated"), 1u);
  pl::Store client{rt, client_options(server.port(), "")};
  client.set("k", "v");
  EXPECT_EQ(server.get("k"), "v");
  // Tokens must still match: a client with a token is refused by a server without one.
  error_of([&] { pl::Store other(rt, client_options(server.port(), "secret")); }, PL_ERR_RUNTIME);
}

TEST_F(StoreConnect, BadPortsAreNamed) {
  auto o = server_options();
  o.port = 70000;
  std::string msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("PL_TcpStoreOptions.port 70000 is not a TCP port; valid: 0..65535"));

  o.port = -1;
  {
    ScopedEnv port("MASTER_PORT", "abc");
    msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("MASTER_PORT='abc' is not a TCP port; valid: 0..65535"));
  }
  for (const char* bad : {"70000", "-5", "12 ", "99999999999999999999999"}) {
    ScopedEnv port("MASTER_PORT", bad);
    msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr(std::string("MASTER_PORT='") + bad + "'"));
  }
  {
    ScopedEnv port("MASTER_PORT", std::nullopt);
    msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("MASTER_PORT is not set"));
  }
  auto c = client_options(0);
  msg = error_of([&] { pl::Store s(rt, c); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("only a server may use"));
}

TEST_F(StoreConnect, HostAndPortComeFromMasterAddrAndMasterPort) {
  int port = free_port();
  ScopedEnv addr("MASTER_ADDR", "127.0.0.1");
  ScopedEnv env_port("MASTER_PORT", std::to_string(port));
  pl::StoreOptions o;
  o.is_server = true;
  o.token = "t";
  o.timeout = 2000ms;
  pl::Store server{rt, o};
  EXPECT_EQ(server.port(), port);
  pl::StoreOptions c;
  c.token = "t";
  c.timeout = 2000ms;
  pl::Store client{rt, c};
  client.set("k", "v");
  EXPECT_EQ(server.get("k"), "v");
}

TEST_F(StoreConnect, BadHostsAndTokensAreNamed) {
  auto o = server_options();
  o.host = "";
  std::string msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("PL_TcpStoreOptions.host is empty"));
  o.host = "no-such-host.invalid";
  msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_RUNTIME);
  EXPECT_THAT(msg, HasSubstr("no-such-host.invalid"));
  o = server_options(std::string(5000, 't'));
  msg = error_of([&] { pl::Store s(rt, o); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("has 5000 bytes; the limit is 4096"));
  PL_Store* out = nullptr;
  PL_TcpStoreOptions bad{};
  bad.struct_size = 1;
  PL_Error* e = pl_store_create_tcp(rt.get(), &bad, &out);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(pl_error_code(e), PL_ERR_VERSION);
  pl_error_destroy(e);
  EXPECT_EQ(out, nullptr);
}

TEST_F(StoreConnect, DestroyingTheServerBreaksItsClientsCleanly) {
  auto server = std::make_unique<pl::Store>(rt, server_options());
  pl::Store client{rt, client_options(server->port(), "job-secret", 500ms)};
  client.set("k", "v");
  auto waiter =
      std::async(std::launch::async, [&] { return error_of([&] { client.get("never", 20000ms); }, PL_ERR_RUNTIME); });
  std::this_thread::sleep_for(100ms);
  auto start = Clock::now();
  server.reset();  // closes every connection, the waiting one included
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_THAT(waiter.get(), HasSubstr("store get for 'never' failed"));
  EXPECT_LT(ms_since(start), 3000);
  error_of([&] { client.set("k", "v"); }, PL_ERR_RUNTIME);
}

}  // namespace
