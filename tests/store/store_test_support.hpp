// Shared by the store tests: runtimes whose log lines are captured, store options, raw sockets that
// speak (or mangle) the wire protocol, and environment variables set for one test.
#pragma once

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>
#include <vector>

#include "store/protocol.hpp"
#include "test_support.hpp"
#include "unit_support.hpp"

namespace store_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

using plrt_test::LogCapture;

inline pl::RuntimeOptions runtime_options(LogCapture* log, const char* level = "warn") {
  pl::RuntimeOptions o;
  o.use_env_dirs = false;
  o.use_default_dirs = false;
  o.log_level = level;
  o.log_callback = &LogCapture::callback;
  o.log_user = log;
  return o;
}

inline pl::StoreOptions server_options(const std::string& token = "job-secret",
                                       std::chrono::milliseconds timeout = 5000ms) {
  pl::StoreOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  o.token = token;
  o.timeout = timeout;
  return o;
}

inline pl::StoreOptions client_options(int port, const std::string& token = "job-secret",
                                       std::chrono::milliseconds timeout = 5000ms) {
  pl::StoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  return o;
}

// A port that was free a moment ago (bound to port 0, then closed).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    ADD_FAILURE() << "cannot find a free port";
  ::close(fd);
  return ntohs(a.sin_port);
}

using plrt_test::ScopedEnv;  // unit_support.hpp

// A plain TCP connection to the server, for sending exactly the bytes a test wants.
class RawSocket {
 public:
  explicit RawSocket(int port, const char* address = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, address, &a.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    connect_errno_ = connected_ ? 0 : errno;
  }
  ~RawSocket() { close(); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return connected_; }
  int connect_errno() const { return connect_errno_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  bool send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads exactly n bytes within `limit`; false if the peer closed or time ran out.
  bool recv_exact(std::string* out, size_t n, std::chrono::milliseconds limit) {
    auto end = Clock::now() + limit;
    out->clear();
    while (out->size() < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[65536];
      ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out->size()), 0);
      if (r <= 0) return false;
      out->append(buf, static_cast<size_t>(r));
    }
    return true;
  }

  // The next reply, decoded; nullopt if none came within `limit`.
  std::optional<plrt::store::Response> reply(std::chrono::milliseconds limit = 3000ms) {
    std::string header, payload;
    if (!recv_exact(&header, plrt::store::kHeaderSize, limit)) return std::nullopt;
    size_t len = 0;
    plrt::store::peek_frame(reinterpret_cast<const uint8_t*>(header.data()), header.size(), plrt::store::kMaxFrame,
                            &len);
    if (!recv_exact(&payload, len, limit)) return std::nullopt;
    plrt::store::Response r;
    std::string why;
    if (!plrt::store::decode_response(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), &r, &why))
      return std::nullopt;
    return r;
  }

  // True when the server closes the connection within `limit` (EOF or reset); bytes that arrive
  // before are skipped.
  bool closed_by_peer(std::chrono::milliseconds limit = 3000ms) {
    auto end = Clock::now() + limit;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return true;
    }
  }

  // Sends the handshake with `token`; true when the server accepts it.
  bool handshake(const std::string& token) {
    plrt::store::Request hello;
    hello.op = plrt::store::Op::Hello;
    hello.value = token;
    if (!send(plrt::store::encode_request(hello))) return false;
    auto r = reply();
    return r && r->kind == plrt::store::Reply::Ok;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  int connect_errno_ = 0;
};

using plrt_test::error_of;

}  // namespace store_test
