// plrun's side of the progress bar: when plrun's stderr is a terminal, it tells the workers
// (PL_PROGRESS_BAR_TTY=<columns>) and rank 0 sends each bar frame as a whole line that starts
// with kBarMarker (a stage's finished line: kBarEndMarker); the markers are APC strings
// (ESC _ ... ESC \), which a terminal ignores should one ever reach it.  plrun owns the terminal and
// sees every rank's lines, so it keeps the bar as the terminal's last line: a frame replaces it in
// place ("\r" + text + "\x1b[K"), a finished line stays as history, and any other line is written
// above it: the bar erased ("\r\x1b[K") before the lines of one read and redrawn once after them,
// so that no worker's line is ever glued to a bar frame.  The markers are sdk/src/progress_bar.hpp's.
#pragma once

#include <string>
#include <string_view>

namespace plrt::launcher {

inline constexpr std::string_view kBarMarker = "\x1b_plrt-bar\x1b\\";
inline constexpr std::string_view kBarEndMarker = "\x1b_plrt-bar-end\x1b\\";
inline constexpr const char* kBarTtyVariable = "PL_PROGRESS_BAR_TTY";

// The column count of the terminal `fd` is (TIOCGWINSZ, else COLUMNS, else 80); 0: not a terminal.
int terminal_columns(int fd);

class ProgressLine {
 public:
  // `lines`: complete lines (each ended by '\n', as LinePrefixer emits them) headed for the terminal;
  // appends to `out` the bytes to write.
  void feed(std::string_view lines, std::string& out);
  // plrun is done: a bar still shown ends where it is (a newline).
  void close(std::string& out);
  bool shown() const { return shown_; }

 private:
  std::string live_;
  bool shown_ = false;
};

}  // namespace plrt::launcher
