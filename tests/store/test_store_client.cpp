// The client against a fake server (a plain listening socket run by the test): answers that never
// come, broken replies, connections closed mid-call, a handshake cut short.
#include <functional>

#include "store_test_support.hpp"

namespace {

using namespace store_test;
using plrt::store::encode_response;
using plrt::store::Reply;
using plrt::store::Response;
using ::testing::HasSubstr;

// Accepts connections on 127.0.0.1 (a free port) and runs `serve` on each, one after another, in
// a thread.  `serve` gets the connection and its index; every read it does is bounded.
class FakeServer {
 public:
  using Serve = std::function<void(int fd, int index)>;
  explicit FakeServer(Serve serve) : serve_(std::move(serve)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      ADD_FAILURE() << "fake server: cannot listen";
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      int index = 0;
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        serve_(c, index++);
        ::close(c);
      }
    });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

  // Reads one frame (header and payload) within 10 s; false if the peer closed first.
  static bool read_frame(int fd, std::string* payload = nullptr) {
    auto read_n = [fd](std::string* out, size_t n) {
      out->clear();
      while (out->size() < n) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 10000) <= 0) return false;
        char buf[4096];
        ssize_t r = ::recv(fd, buf, std::min(sizeof buf, n - out->size()), 0);
        if (r <= 0) return false;
        out->append(buf, static_cast<size_t>(r));
      }
      return true;
    };
    std::string header, body;
    if (!read_n(&header, 4)) return false;
    size_t len = 0;
    for (int i = 0; i < 4; ++i) len |= static_cast<size_t>(static_cast<uint8_t>(header[i])) << (8 * i);
    if (!read_n(&body, len)) return false;
    if (payload) *payload = body;
    return true;
  }
  static void send(int fd, const std::string& bytes) { ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  static void accept_handshake(int fd) {
    if (read_frame(fd)) send(fd, encode_response({Reply::Ok, {}, 0, {}}));
  }
  // Waits (bounded) until the client closes the connection.
  static void drain(int fd) {
    while (read_frame(fd)) {
    }
  }

 private:
  Serve serve_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class StoreClient : public ::testing::Test {
 protected:
  LogCapture log;
  pl::Runtime rt{runtime_options(&log)};
};

TEST_F(StoreClient, NoAnswerWithinTheStoresTimeoutIsATimeout) {
  FakeServer fake([](int fd, int) {
    FakeServer::accept_handshake(fd);
    FakeServer::drain(fd);  // reads the set, never answers
  });
  pl::Store c{rt, client_options(fake.port(), "t", 300ms)};
  auto start = Clock::now();
  std::string msg = error_of([&] { c.set("k", "v"); }, PL_ERR_TIMEOUT);
  EXPECT_EQ(msg, "store set for 'k': no answer from the store at 127.0.0.1:" + std::to_string(fake.port()) +
                     " within 300 ms");
  EXPECT_GE(ms_since(start), 280);
  EXPECT_LT(ms_since(start), 3000);
}

TEST_F(StoreClient, AGetTheServerNeverAnswersEndsAtItsTimeoutPlusGrace) {
  FakeServer fake([](int fd, int) {
    FakeServer::accept_handshake(fd);
    FakeServer::drain(fd);
  });
  pl::Store c{rt, client_options(fake.port(), "t", 300ms)};
  auto start = Clock::now();
  std::string msg = error_of([&] { c.get("k", 100ms); }, PL_ERR_TIMEOUT);
  EXPECT_THAT(msg, HasSubstr("store get for 'k': no answer from the store"));
  EXPECT_THAT(msg, HasSubstr("within 5100 ms"));
  EXPECT_GE(ms_since(start), 5000);
  EXPECT_LT(ms_since(start), 9000);
}

TEST_F(StoreClient, BrokenRepliesAreErrors) {
  FakeServer fake([](int fd, int index) {
    FakeServer::accept_handshake(fd);
    if (!FakeServer::read_frame(fd)) return;
    if (index == 0) FakeServer::send(fd, std::string("\x01\x00\x00\x00\x63", 5));    // reply type 99
    if (index == 1) FakeServer::send(fd, encode_response({Reply::Int, {}, 5, {}}));  // int for a set
    if (index == 2) FakeServer::send(fd, std::string("\xff\xff\xff\x7f", 4));        // a 2 GiB frame
    if (index == 3) return;                                                          // closes
    FakeServer::drain(fd);
  });
  {
    pl::Store c{rt, client_options(fake.port(), "t", 2000ms)};
    EXPECT_THAT(error_of([&] { c.set("k", "v"); }, PL_ERR_RUNTIME),
                HasSubstr("malformed reply from the store: unknown reply type 99"));
  }
  {
    pl::Store c{rt, client_options(fake.port(), "t", 2000ms)};
    EXPECT_THAT(error_of([&] { c.set("k", "v"); }, PL_ERR_RUNTIME), HasSubstr("sent an unexpected 'int' reply"));
  }
  {
    pl::Store c{rt, client_options(fake.port(), "t", 2000ms)};
    EXPECT_THAT(error_of([&] { c.set("k", "v"); }, PL_ERR_RUNTIME),
                HasSubstr("the store sent a frame of 2147483647 bytes"));
  }
  {
    pl::Store c{rt, client_options(fake.port(), "t", 2000ms)};
    EXPECT_THAT(error_of([&] { c.set("k", "v"); }, PL_ERR_RUNTIME),
                HasSubstr("store set for 'k' failed: the connection to the store at 127.0.0.1:" +
                          std::to_string(fake.port()) + " broke: the store closed the connection"));
  }
}

TEST_F(StoreClient, AHandshakeCutShortIsRetried) {
  FakeServer fake([](int fd, int index) {
    if (index < 2) return;  // the first two connections are closed at once
    FakeServer::accept_handshake(fd);
    std::string payload;
    while (FakeServer::read_frame(fd, &payload))
      if (!payload.empty() && payload[0] == 9) FakeServer::send(fd, encode_response({Reply::Int, {}, 42, {}}));
  });
  pl::Store c{rt, client_options(fake.port(), "t", 5000ms)};
  EXPECT_EQ(c.num_keys(), 42);
}

TEST_F(StoreClient, AServerThatClosesWhileWritingDoesNotRaiseSigpipe) {
  LogCapture server_log;
  pl::Runtime srt{runtime_options(&server_log)};
  pl::Store server{srt, server_options("t")};
  server.set("big", std::string(16 << 20, 'b'));
  for (int i = 0; i < 3; ++i) {
    RawSocket raw(server.port());
    ASSERT_TRUE(raw.handshake("t"));
    plrt::store::Request get;
    get.op = plrt::store::Op::Get;
    get.key = "big";
    get.number = 1000;
    raw.send(plrt::store::encode_request(get));
    std::string first;
    raw.recv_exact(&first, 1000, 2000ms);
    raw.close();  // while the server is still writing 16 MiB
  }
  pl::Store c{srt, client_options(server.port(), "t")};
  EXPECT_EQ(c.get("big").size(), size_t{16} << 20);
}

}  // namespace
