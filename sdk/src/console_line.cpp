// ConsoleLine: the progress bar's line on stderr and the log lines around it (see the header).
#include "console_line.hpp"

#include <unistd.h>

#include <cerrno>

namespace plrt::sdk {

ConsoleLine& ConsoleLine::get() {
  static auto* line = new ConsoleLine();  // never destroyed: logging may go on during exit
  return *line;
}

void ConsoleLine::write_all(const std::string& bytes) const {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(STDERR_FILENO, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing to show
    off += static_cast<size_t>(n);
  }
}

void ConsoleLine::show(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ = text;
  shown_ = true;
  write_all("\r" + text + "\x1b[K");
}

void ConsoleLine::finish(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.clear();
  shown_ = false;
  write_all("\r" + text + "\x1b[K\n");
}

void ConsoleLine::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!shown_) return;
  live_.clear();
  shown_ = false;
  write_all("\n");
}

void ConsoleLine::log_line(const char* line) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  if (shown_) out = "\r\x1b[K";
  out += line;
  out += '\n';
  if (shown_) out += live_ + "\x1b[K";
  write_all(out);
}

void ConsoleLine::log_callback(void*, PL_LogLevel, const char* line) { get().log_line(line); }

}  // namespace plrt::sdk
