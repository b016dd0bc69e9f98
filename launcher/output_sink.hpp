// plrun's own stdout or stderr, written from its poll loop without ever blocking it for long: a
// slow reader of plrun's output must not stop plrun from forwarding a Ctrl-C or reaping a worker.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace plrt::launcher {

class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {}

  void append(std::string_view text) {
    if (!broken_) buf_.append(text);
  }
  size_t buffered() const { return buf_.size() - off_; }
  int fd() const { return fd_; }
  // The poll events to wait for: POLLOUT while something is buffered.
  short events() const;
  // After poll: writes what the fd takes now, in PIPE_BUF pieces (a pipe that polls writable takes
  // that much without blocking).  An fd that is gone (the reader closed it) drops the output: the
  // job keeps running rather than dying of SIGPIPE.
  void on_ready(short revents);
  // Writes everything left (plrun is exiting), giving up after `timeout_ms` without progress (a
  // reader that stopped reading), or 10 x `timeout_ms` in all.
  void flush(int timeout_ms);

 private:
  void write_some();
  int fd_;
  std::string buf_;
  size_t off_ = 0;
  bool broken_ = false;
};

}  // namespace plrt::launcher
