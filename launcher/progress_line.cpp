// ProgressLine: rank 0's bar kept as the last line of plrun's terminal (see the header).
#include "progress_line.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>

namespace plrt::launcher {

int terminal_columns(int fd) {
  if (!::isatty(fd)) return 0;
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && *c) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (*end == '\0' && v > 0 && v <= 100000) return static_cast<int>(v);
  }
  return 80;
}

void ProgressLine::feed(std::string_view lines, std::string& out) {
  bool erased = false;  // the bar was erased for the lines of this call
  while (!lines.empty()) {
    size_t nl = lines.find('\n');
    std::string_view line = lines.substr(0, nl == std::string_view::npos ? lines.size() : nl);
    lines.remove_prefix(nl == std::string_view::npos ? lines.size() : nl + 1);
    if (size_t m = line.find(kBarEndMarker); m != std::string_view::npos) {
      out += "\r";
      out += line.substr(m + kBarEndMarker.size());
      out += "\x1b[K\n";
      live_.clear();
      shown_ = erased = false;
    } else if (size_t f = line.find(kBarMarker); f != std::string_view::npos) {
      live_ = std::string(line.substr(f + kBarMarker.size()));
      out += "\r" + live_ + "\x1b[K";
      shown_ = true;
      erased = false;
    } else {
      if (shown_ && !erased) {
        out += "\r\x1b[K";
        erased = true;
      }
      out += line;
      out += '\n';
    }
  }
  if (erased && shown_) out += live_ + "\x1b[K";
}

void ProgressLine::close(std::string& out) {
  if (!shown_) return;
  out += '\n';
  live_.clear();
  shown_ = false;
}

}  // namespace plrt::launcher
