// Bad input from raw sockets: each closes its own connection (with a warning naming the peer and
// the reason) while the server keeps serving everyone else.
#include "store_test_support.hpp"

namespace {

using namespace store_test;
using plrt::store::encode_request;
using plrt::store::Op;
using plrt::store::Reply;
using plrt::store::Request;
using ::testing::HasSubstr;

const std::string kToken = "job-secret";

std::string frame(const std::string& payload) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((payload.size() >> (8 * i)) & 0xFF);
  return out + payload;
}

Request req(Op op, std::string key = {}, int64_t number = 0) {
  Request r;
  r.op = op;
  r.key = std::move(key);
  r.number = number;
  return r;
}

class StoreRobustness : public ::testing::Test {
 protected:
  LogCapture log;
  pl::Runtime rt{runtime_options(&log, "debug")};
  pl::Store server{rt, server_options(kToken)};
  int port = server.port();

  // A proper client, on a new connection, still gets served.
  void expect_still_serving() {
    pl::Store c{rt, client_options(port, kToken, 2000ms)};
    std::string key = "alive/" + std::to_string(counter_++);
    c.set(key, "yes");
    EXPECT_EQ(server.get(key, 1000ms), "yes");
  }
  // The warning that closed a connection: names the peer and every piece of the reason.
  void expect_dropped(std::vector<std::string> reason) {
    reason.insert(reason.begin(), "closing the store connection from 127.0.0.1:");
    std::string line = log.wait_for(reason);
    EXPECT_FALSE(line.empty()) << "no warning with '" << reason.back() << "' in:\n" << log.all();
    EXPECT_THAT(line, HasSubstr("[warning]"));
  }

 private:
  int counter_ = 0;
};

TEST_F(StoreRobustness, GarbageBytes) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.connected());
  raw.send("GET / HTTP/1.1\r\nHost: store\r\n\r\n");
  EXPECT_TRUE(raw.closed_by_peer());
  expect_dropped({"a frame of 542393671 bytes exceeds the limit of 16384 bytes before the handshake"});
  expect_still_serving();

  RawSocket small(port);
  small.send(frame("hello"));
  EXPECT_TRUE(small.closed_by_peer());
  expect_dropped({"malformed message: unknown request type 104"});
  expect_still_serving();
}

TEST_F(StoreRobustness, TruncatedFrameThenClose) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.handshake(kToken));
  std::string set = encode_request([] {
    Request r = req(Op::Set, "k");
    r.value = std::string(1000, 'v');
    return r;
  }());
  raw.send(set.substr(0, 300));
  raw.close();
  expect_dropped({"closed the connection in the middle of a frame (300 bytes received)"});
  expect_still_serving();
  EXPECT_FALSE(server.check_keys({"k"}));
}

TEST_F(StoreRobustness, OversizedLengthPrefix) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.handshake(kToken));
  raw.send(std::string("\xff\xff\xff\xff", 4) + "more");
  EXPECT_TRUE(raw.closed_by_peer());
  expect_dropped({"a frame of 4294967295 bytes exceeds the limit of 67108864 bytes"});
  expect_still_serving();
}

TEST_F(StoreRobustness, FrameBeforeTheHandshake) {
  RawSocket raw(port);
  Request set = req(Op::Set, "sneaky");
  set.value = "v";
  raw.send(encode_request(set));
  EXPECT_TRUE(raw.closed_by_peer());
  expect_dropped({"a set request before the handshake"});
  EXPECT_FALSE(server.check_keys({"sneaky"}));
  expect_still_serving();
}

TEST_F(StoreRobustness, MalformedRequestAfterTheHandshake) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.handshake(kToken));
  raw.send(
      frame(std::string("\x02\x0a\x00\x00\x00"
                        "abc",
                        8)));  // set: the key announces 10 bytes, 3 follow
  EXPECT_TRUE(raw.closed_by_peer());
  expect_dropped({"malformed message: set request: the key announces 10 bytes but only 3 remain"});

  RawSocket trailing(port);
  ASSERT_TRUE(trailing.handshake(kToken));
  trailing.send(frame(std::string("\x09\x00", 2)));  // num_keys with a stray byte
  EXPECT_TRUE(trailing.closed_by_peer());
  expect_dropped({"num_keys request: 1 unexpected bytes after the message"});

  RawSocket zero_timeout(port);
  ASSERT_TRUE(zero_timeout.handshake(kToken));
  zero_timeout.send(frame(std::string("\x03\x01\x00\x00\x00k\x00\x00\x00\x00\x00\x00\x00\x00", 14)));
  EXPECT_TRUE(zero_timeout.closed_by_peer());
  expect_dropped({"get request: a timeout of 0 ms (must be > 0)"});

  RawSocket again(port);
  ASSERT_TRUE(again.handshake(kToken));
  Request hello;
  hello.op = Op::Hello;
  hello.value = kToken;
  again.send(encode_request(hello));
  EXPECT_TRUE(again.closed_by_peer());
  expect_dropped({"a second handshake"});
  expect_still_serving();
}

TEST_F(StoreRobustness, WrongMagicAndVersion) {
  RawSocket magic(port);
  Request hello;
  hello.op = Op::Hello;
  hello.value = kToken;
  std::string bytes = encode_request(hello);
  bytes[5] ^= 0x55;  // inside the magic
  magic.send(bytes);
  EXPECT_TRUE(magic.closed_by_peer());
  expect_dropped({"wrong protocol magic"});

  RawSocket version(port);
  hello.version = 99;
  version.send(encode_request(hello));
  auto reply = version.reply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->kind, Reply::Error);
  EXPECT_THAT(reply->text, HasSubstr("protocol version 99; this server speaks version 1"));
  EXPECT_TRUE(version.closed_by_peer());
  EXPECT_FALSE(log.wait_for({"refused a store connection from 127.0.0.1:", "protocol version 99"}).empty());
  expect_still_serving();
}

TEST_F(StoreRobustness, WrongTokenOnARawSocketIsClosed) {
  RawSocket raw(port);
  EXPECT_FALSE(raw.handshake("not-the-token"));
  EXPECT_TRUE(raw.closed_by_peer());
  EXPECT_FALSE(log.wait_for({"refused a store connection from 127.0.0.1:", "wrong job token"}).empty());
  expect_still_serving();
}

TEST_F(StoreRobustness, SlowAndHalfOpenClientsDoNotBlockTheServer) {
  RawSocket half_header(port);
  half_header.send(std::string("\x10\x00", 2));  // two bytes of a header, then silence
  RawSocket half_frame(port);
  ASSERT_TRUE(half_frame.handshake(kToken));
  half_frame.send(std::string("\x00\x10\x00\x00\x02", 5));  // 4096 bytes announced, 1 sent
  RawSocket silent(port);                                   // connects, says nothing
  auto start = Clock::now();
  expect_still_serving();
  EXPECT_LT(ms_since(start), 1000);
}

TEST_F(StoreRobustness, AClientThatLeavesWhileWaitingIsCleanedUp) {
  {
    RawSocket raw(port);
    ASSERT_TRUE(raw.handshake(kToken));
    raw.send(encode_request(req(Op::Get, "never", 60000)));
    std::this_thread::sleep_for(50ms);
  }  // closed while its get waits
  EXPECT_FALSE(log.wait_for({"store connection from 127.0.0.1:", "closed while waiting for 'never'"}).empty())
      << log.all();
  server.set("never", "now");  // wakes nobody; must not touch the closed connection
  expect_still_serving();
}

TEST_F(StoreRobustness, ARequestWhileWaitingIsAProtocolError) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.handshake(kToken));
  raw.send(encode_request(req(Op::Get, "pending", 60000)));
  raw.send(encode_request(req(Op::NumKeys)));
  EXPECT_TRUE(raw.closed_by_peer());
  expect_dropped({"a num_keys request while its get was still waiting"});
  expect_still_serving();
}

TEST_F(StoreRobustness, RequestsSentTogetherAreAnsweredInOrder) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.handshake(kToken));
  Request set = req(Op::Set, "p");
  set.value = "1";
  raw.send(encode_request(set) + encode_request(req(Op::Add, "q", 5)) + encode_request(req(Op::NumKeys)));
  auto a = raw.reply(), b = raw.reply(), c = raw.reply();
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->kind, Reply::Ok);
  EXPECT_EQ(b->kind, Reply::Int);
  EXPECT_EQ(b->number, 5);
  EXPECT_EQ(c->kind, Reply::Int);
  EXPECT_EQ(c->number, 2);
}

TEST_F(StoreRobustness, ServerSideTimeoutReplyListsMissingKeys) {
  RawSocket raw(port);
  ASSERT_TRUE(raw.handshake(kToken));
  server.set("present", "1");
  Request wait = req(Op::Wait, {}, 100);
  wait.keys = {"present", "absent"};
  raw.send(encode_request(wait));
  auto r = raw.reply(2000ms);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->kind, Reply::Timeout);
  EXPECT_EQ(r->keys, std::vector<std::string>{"absent"});
  raw.send(encode_request(req(Op::NumKeys)));  // the connection is usable after a timeout
  auto n = raw.reply();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->number, 1);
}

}  // namespace
