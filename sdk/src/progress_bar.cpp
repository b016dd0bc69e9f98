// ProgressBar: rank 0's live line per stage (see the header); render_bar: one frame's text.
#include "progress_bar.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <plrt/sdk/error.hpp>

#include "console_line.hpp"

namespace plrt::sdk {

namespace {

constexpr double kRedrawSeconds = 0.1;  // at most 10 frames a second
constexpr int kMaxBarWidth = 40;
constexpr int kMinBarWidth = 10;

std::string clock_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

std::string printed(double v, const char* f = "%.4g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && *c) {
    char* end = nullptr;
    long v = std::strtol(c, &end, 10);
    if (*end == '\0' && v > 0 && v < 100000) return static_cast<int>(v);
  }
  return 80;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void write_stderr(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(STDERR_FILENO, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string render_bar(const BarFrame& f, int columns) {
  std::string left = f.stage == "train" ? "epoch " + std::to_string(f.epoch) : f.stage;
  if (f.stage == "train" && f.last_epoch >= 0) left += "/" + std::to_string(f.last_epoch);
  left += "  " + std::to_string(f.done) + "/" + std::to_string(f.total) + " ";
  const double frac =
      f.total > 0 ? std::clamp(static_cast<double>(f.done) / static_cast<double>(f.total), 0.0, 1.0) : 1.0;
  const double counted = static_cast<double>(f.done - f.done_at_start);
  const double rate = f.elapsed_s > 0 && counted > 0 ? counted / f.elapsed_s : 0;
  std::string right = " " + std::to_string(static_cast<int>(frac * 100)) + "%  ";
  right += rate > 0 ? printed(rate, "%.1f") + " it/s" : "? it/s";
  if (f.finished)
    right += "  " + clock_text(f.elapsed_s);
  else
    right += "  ETA " + (rate > 0 ? clock_text(static_cast<double>(f.total - f.done) / rate) : std::string("?"));
  std::string vals;
  for (const auto& [name, v] : f.values) vals += (vals.empty() ? "  " : " ") + name + "=" + printed(v);
  // The bar takes the room the text leaves, from kMinBarWidth (the values' tail cut instead) to
  // kMaxBarWidth; none when even the text without the values leaves less.
  const int room = columns - 1;
  const int text = static_cast<int>(left.size() + right.size()) + 2;
  const int avail = room - text - static_cast<int>(vals.size());
  std::string line = left;
  if (avail >= kMinBarWidth || room - text >= kMinBarWidth) {
    const int w = std::clamp(avail, kMinBarWidth, kMaxBarWidth);
    const int full = static_cast<int>(frac * w);
    std::string bar(static_cast<size_t>(w), ' ');
    for (int i = 0; i < full; ++i) bar[static_cast<size_t>(i)] = '=';
    if (full < w) bar[static_cast<size_t>(full)] = '>';
    line += "[" + bar + "]";
  } else {
    line.pop_back();  // no bar: one space less
  }
  line += right + vals;
  if (static_cast<int>(line.size()) > std::max(room, 0)) line.resize(static_cast<size_t>(std::max(room, 0)));
  return line;
}

ProgressBar::Setup ProgressBar::detect(bool enabled) {
  Setup s;
  const char* tty = std::getenv(kBarTtyVariable);
  if (tty && *tty) {  // plrun's terminal (set only when plrun's stderr is one)
    char* end = nullptr;
    long v = std::strtol(tty, &end, 10);
    if (*end != '\0' || v < 1 || v > 100000)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string(kBarTtyVariable) + "='" + tty +
                                                   "' is not valid: plrun sets it to its terminal's column count "
                                                   "(an integer from 1 to 100000); unset it");
    if (enabled) s.mode = Mode::marker, s.columns = static_cast<int>(v);
    return s;
  }
  if (enabled && ::isatty(STDERR_FILENO)) s.mode = Mode::terminal, s.columns = terminal_columns();
  return s;
}

ProgressBar::ProgressBar(Setup s, Output out, Clock now) : setup_(s), out_(std::move(out)), now_(std::move(now)) {
  if (!now_) now_ = steady_seconds;
  if (out_ || setup_.mode == Mode::off) return;
  if (setup_.mode == Mode::terminal)
    out_ = [](const std::string& text, bool final) {
      final ? ConsoleLine::get().finish(text) : ConsoleLine::get().show(text);
    };
  else
    out_ = [](const std::string& text, bool final) {
      write_stderr((final ? kBarEndMarker : kBarMarker) + text + "\n");
    };
}

ProgressBar::~ProgressBar() { close(); }

void ProgressBar::start(const std::string& stage, int64_t epoch, int64_t last_epoch, int64_t total, int64_t done) {
  if (!active()) return;
  BarFrame& f = depth_ == 0 ? outer_ : inner_;
  (depth_ == 0 ? outer_t0_ : inner_t0_) = now_();
  f = BarFrame{};
  f.stage = stage, f.epoch = epoch, f.last_epoch = last_epoch, f.total = total, f.done = done, f.done_at_start = done;
  depth_ = std::min(depth_ + 1, 2);
  draw(f, false);
}

void ProgressBar::update(int64_t done, const std::map<std::string, double>& values) {
  if (!active() || depth_ == 0) return;
  BarFrame& f = depth_ == 2 ? inner_ : outer_;
  f.done = done;
  f.values = values;
  if (now_() - last_draw_ >= kRedrawSeconds) draw(f, false);
}

bool ProgressBar::due() const { return active() && depth_ > 0 && now_() - last_draw_ >= kRedrawSeconds; }

void ProgressBar::advance(int64_t done) {
  if (active() && depth_ > 0) (depth_ == 2 ? inner_ : outer_).done = done;
}

void ProgressBar::finish(const std::map<std::string, double>& values) {
  if (!active() || depth_ == 0) return;
  BarFrame& f = depth_ == 2 ? inner_ : outer_;
  f.values = values;
  f.finished = true;
  if (depth_ == 2) {  // back to the outer stage's line
    depth_ = 1;
    draw(outer_, false);
    return;
  }
  depth_ = 0;
  draw(f, true);
}

void ProgressBar::close() {
  if (!active() || depth_ == 0) return;
  depth_ = 0;
  outer_.finished = true;
  draw(outer_, true);
}

void ProgressBar::draw(BarFrame& f, bool final) {
  const double t = now_();
  f.elapsed_s = t - (&f == &inner_ ? inner_t0_ : outer_t0_);
  last_draw_ = t;
  ++frames_;
  out_(render_bar(f, setup_.columns), final);
}

}  // namespace plrt::sdk
