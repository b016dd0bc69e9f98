#include "output_sink.hpp"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace plrt::launcher {

namespace {
constexpr int kChunksPerCall = 64;  // then back to the poll loop, so that nothing else waits long
}

short OutputSink::events() const { return buffered() > 0 && !broken_ ? POLLOUT : 0; }

void OutputSink::on_ready(short revents) {
  // POLLERR, POLLHUP or POLLNVAL: the write fails at once (EPIPE, EIO, EBADF) and marks it broken.
  if (revents) write_some();
}

void OutputSink::write_some() {
  for (int i = 0; i < kChunksPerCall && buffered() > 0; ++i) {
    if (i > 0) {  // still writable?
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT)) break;
    }
    size_t n = std::min<size_t>(buffered(), PIPE_BUF);
    ssize_t w = ::write(fd_, buf_.data() + off_, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w < 0) {  // EPIPE, EBADF, EIO: nobody reads this any more
      broken_ = true;
      buf_.clear();
      off_ = 0;
      return;
    }
    off_ += static_cast<size_t>(w);
  }
  if (off_ == buf_.size()) {
    buf_.clear();
    off_ = 0;
  } else if (off_ > (1u << 20)) {  // keep the buffer from growing at its front
    buf_.erase(0, off_);
    off_ = 0;
  }
}

void OutputSink::flush(int timeout_ms) {
  // timeout_ms without progress gives up (a reader that stopped reading); ten times it in all.
  using Clock = std::chrono::steady_clock;
  const auto cap = Clock::now() + 10 * std::chrono::milliseconds(timeout_ms);
  auto until = std::min(cap, Clock::now() + std::chrono::milliseconds(timeout_ms));
  while (buffered() > 0 && !broken_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd_, POLLOUT, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    const size_t before = buffered();
    on_ready(p.revents);
    if (buffered() < before) until = std::min(cap, Clock::now() + std::chrono::milliseconds(timeout_ms));
  }
}

}  // namespace plrt::launcher
