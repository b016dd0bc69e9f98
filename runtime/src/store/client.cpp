// The store's client over POSIX sockets.  Every socket is non-blocking; every wait is a poll()
// bounded by a deadline; sends use MSG_NOSIGNAL so that a closed peer never raises SIGPIPE.
#include "store/client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "error.hpp"

namespace plrt::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxIdle = 16;

// A failed socket operation, before it is turned into a message for the user.
struct IoError {
  enum Kind {
    Timeout,
    Closed,
    Failed
  } kind;
  std::string message;
};

std::string errno_text(int err) { return std::strerror(err); }

int64_t ms_left(Clock::time_point deadline) {
  auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : left;
}

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

Clock::time_point deadline_after(int64_t ms) {
  // Far enough for any real wait, near enough not to overflow the clock.
  return Clock::now() + milliseconds(std::min<int64_t>(ms, int64_t{1} << 40));
}

// Waits until `fd` is ready for `events`, or throws Timeout at the deadline (looking once more
// at the deadline itself, so that a result that is already there is not reported as a timeout).
void wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int64_t left = ms_left(deadline);
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (r > 0) return;
    if (r < 0 && errno != EINTR) throw IoError{IoError::Failed, "poll: " + errno_text(errno)};
    if (r == 0 && left <= 0) throw IoError{IoError::Timeout, "timed out"};
  }
}

}  // namespace

// One authenticated socket.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void send_all(const std::string& data, Clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait_ready(fd_, POLLOUT, deadline);
      } else if (n < 0 && errno != EINTR) {
        throw IoError{errno == EPIPE || errno == ECONNRESET ? IoError::Closed : IoError::Failed, errno_text(errno)};
      }
    }
  }

  void recv_exact(uint8_t* out, size_t size, Clock::time_point deadline) {
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::recv(fd_, out + done, size - done, 0);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n == 0) {
        throw IoError{IoError::Closed, "the store closed the connection"};
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_ready(fd_, POLLIN, deadline);
      } else if (errno != EINTR) {
        throw IoError{errno == ECONNRESET ? IoError::Closed : IoError::Failed, errno_text(errno)};
      }
    }
  }

  Response receive(Clock::time_point deadline) {
    uint8_t header[kHeaderSize];
    recv_exact(header, sizeof header, deadline);
    size_t len = 0;
    if (peek_frame(header, sizeof header, kMaxFrame, &len) == FrameStatus::TooLarge)
      throw IoError{IoError::Failed, "the store sent a frame of " + std::to_string(len) + " bytes (limit " +
                                         std::to_string(kMaxFrame) + ")"};
    std::vector<uint8_t> payload(len);
    recv_exact(payload.data(), len, deadline);
    Response r;
    std::string why;
    if (!decode_response(payload.data(), payload.size(), &r, &why))
      throw IoError{IoError::Failed, "malformed reply from the store: " + why};
    return r;
  }

 private:
  int fd_;
};

namespace {

// Connects one socket to one address before the deadline; -1 and *err on failure.
int connect_to(const addrinfo* ai, Clock::time_point deadline, std::string* err) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *err = "socket: " + errno_text(errno);
    return -1;
  }
  int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (r < 0 && errno == EINPROGRESS) {
    try {
      wait_ready(fd, POLLOUT, deadline);
      int so_error = 0;
      socklen_t len = sizeof so_error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
      r = so_error ? -1 : 0;
      errno = so_error;
    } catch (const IoError& e) {
      *err = "connect: " + e.message;
      ::close(fd);
      return -1;
    }
  }
  if (r < 0) {
    *err = errno_text(errno);
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

Client::Client(std::shared_ptr<spdlog::logger> logger, std::string host, uint16_t port, std::string token,
               int64_t timeout_ms)
    : log_(std::move(logger)),
      host_(std::move(host)),
      port_(port),
      token_(std::move(token)),
      timeout_ms_(timeout_ms),
      where_((host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_)) {
  idle_.push_back(connect());
}

Client::~Client() = default;

std::unique_ptr<Connection> Client::connect() {
  auto start = Clock::now();
  auto deadline = deadline_after(timeout_ms_);
  auto backoff = milliseconds(10);
  std::string last_error;
  int attempts = 0;
  for (;;) {
    ++attempts;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
    if (gai != 0) {
      last_error = "cannot resolve '" + host_ + "': " + ::gai_strerror(gai);
    } else {
      int fd = -1;
      std::string err;
      for (const addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) fd = connect_to(ai, deadline, &err);
      // A connect cut short by the deadline says less than the error of the attempt before it.
      if (fd < 0 && (last_error.empty() || err != "connect: timed out")) last_error = err;
      ::freeaddrinfo(found);
      if (fd >= 0) {
        auto conn = std::make_unique<Connection>(fd);
        Request hello;
        hello.op = Op::Hello;
        hello.value = token_;
        try {
          conn->send_all(encode_request(hello), deadline);
          Response r = conn->receive(deadline);
          if (r.kind == Reply::Ok) {
            log_->debug("connected to the store at {} (attempt {})", where_, attempts);
            return conn;
          }
          if (r.kind == Reply::BadToken)
            rt::fail(PL_ERR_RUNTIME, "the store at " + where_ +
                                         " refused the job token (check PL_JOB_TOKEN: every process of the job "
                                         "must have the same one)");
          rt::fail(PL_ERR_RUNTIME, "the store at " + where_ + " refused the connection: " +
                                       (r.kind == Reply::Error ? r.text
                                                               : std::string("unexpected reply '") +
                                                                     reply_name(r.kind) + "' to the handshake"));
        } catch (const IoError& e) {
          if (e.kind == IoError::Failed)
            rt::fail(PL_ERR_RUNTIME, "handshake with the store at " + where_ + ": " + e.message);
          last_error = "handshake: " + e.message;  // closed or timed out: try again
        }
      }
    }
    if (ms_left(deadline) <= 0)
      rt::fail(PL_ERR_RUNTIME, "could not connect to the store at " + where_ + " (tried for " +
                                   std::to_string(ms_since(start)) + " ms, " + std::to_string(attempts) +
                                   " attempts): " + last_error);
    log_->debug("store at {} not reachable yet ({}); retrying in {} ms", where_, last_error, backoff.count());
    std::this_thread::sleep_for(std::min(backoff, milliseconds(ms_left(deadline))));
    backoff = std::min(backoff * 2, milliseconds(500));
  }
}

std::unique_ptr<Connection> Client::take_idle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.empty()) return nullptr;
  auto c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void Client::give_back(std::unique_ptr<Connection> c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(c));
}

Response Client::call(const Request& request, int64_t answer_timeout_ms, const std::string& what) {
  std::string frame;
  try {
    frame = encode_request(request);
  } catch (const std::logic_error& e) {  // a field over its limit (protocol.hpp)
    rt::fail(PL_ERR_INVALID_ARGUMENT, "store " + what + ": " + e.what());
  }
  auto conn = take_idle();
  if (!conn) conn = connect();
  auto deadline = deadline_after(answer_timeout_ms);
  try {
    conn->send_all(frame, deadline);
    Response r = conn->receive(deadline);
    give_back(std::move(conn));
    return r;
  } catch (const IoError& e) {
    conn.reset();  // its state is unknown: never reuse it
    if (e.kind == IoError::Timeout)
      rt::fail(PL_ERR_TIMEOUT, "store " + what + ": no answer from the store at " + where_ + " within " +
                                   std::to_string(answer_timeout_ms) + " ms");
    rt::fail(PL_ERR_RUNTIME,
             "store " + what + " failed: the connection to the store at " + where_ + " broke: " + e.message);
  }
}

}  // namespace plrt::store
