// Rank 0's live progress bar (TrainerOptions::enable_progress_bar): one line per stage ("train",
// "validate", "test") with the epoch, batch/total, a bar, it/s, the ETA and the values logged with
// prog_bar, redrawn at most every 100 ms and at the stage's end.  Where it goes (ProgressBar::detect):
//  - stderr is a terminal: drawn in place through ConsoleLine (the log lines go around it);
//  - under plrun whose stderr is a terminal (PL_PROGRESS_BAR_TTY=<columns>, set by plrun): each frame
//    is a whole line on stderr that starts with kBarMarker (kBarEndMarker for a stage's finished
//    line); plrun keeps it as the last line of its terminal (launcher/progress_line.*);
//  - otherwise nothing (the trainer prints its per-epoch lines).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace plrt::sdk {

// The frame markers of the plrun protocol: ESC _ ... ESC \ is an APC string, which terminals ignore.
inline constexpr const char* kBarMarker = "\x1b_plrt-bar\x1b\\";
inline constexpr const char* kBarEndMarker = "\x1b_plrt-bar-end\x1b\\";
inline constexpr const char* kBarTtyVariable = "PL_PROGRESS_BAR_TTY";

struct BarFrame {
  std::string stage;        // "train", "validate", "test"
  int64_t epoch = 0;        // train: the epoch shown
  int64_t last_epoch = -1;  // train: "epoch E/last" when >= 0
  int64_t done = 0, total = 0;
  double elapsed_s = 0;       // since the stage started
  int64_t done_at_start = 0;  // a resumed epoch's batches done before this run (not in the rate)
  bool finished = false;      // the elapsed time instead of the ETA
  std::map<std::string, double> values;
};

// The line for `f`, at most columns - 1 characters (the last column would wrap on some terminals).
std::string render_bar(const BarFrame& f, int columns);

class ProgressBar {
 public:
  enum class Mode {
    off,
    terminal,
    marker
  };
  struct Setup {
    Mode mode = Mode::off;
    int columns = 80;
  };
  // Where the bar goes (see the top of this file); `enabled`: TrainerOptions::enable_progress_bar.
  // A bad PL_PROGRESS_BAR_TTY is an error naming it.
  static Setup detect(bool enabled);
  // `out(text, final)`: a frame; final: the stage's finished line.  Default: the mode's (ConsoleLine
  // or marker lines on stderr).  `now`: seconds on a steady clock (tests inject one).
  using Output = std::function<void(const std::string& text, bool final)>;
  using Clock = std::function<double()>;
  explicit ProgressBar(Setup s, Output out = nullptr, Clock now = nullptr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool active() const { return setup_.mode != Mode::off; }
  // A stage begins (drawn at once).  A stage started while another runs (validation inside fit's
  // epoch) is transient: its end redraws the outer stage instead of leaving a finished line.
  void start(const std::string& stage, int64_t epoch, int64_t last_epoch, int64_t total, int64_t done = 0);
  // `done` batches of the stage; drawn when 100 ms passed since the last frame.
  void update(int64_t done, const std::map<std::string, double>& values);
  // Whether update would draw now: the caller gathers the values only then (once per frame, not
  // once per batch), and calls advance otherwise.
  bool due() const;
  void advance(int64_t done);
  // The stage ends: its last frame (with `values`), a finished line unless it was nested.
  void finish(const std::map<std::string, double>& values);
  // Ends whatever stage is open (fit stopped inside an epoch): its line is finished where it is.
  void close();
  bool open() const { return depth_ > 0; }
  int frames() const { return frames_; }  // frames drawn so far

 private:
  void draw(BarFrame& f, bool final);
  Setup setup_;
  Output out_;
  Clock now_;
  BarFrame outer_, inner_;
  double outer_t0_ = 0, inner_t0_ = 0, last_draw_ = -1e9;
  int depth_ = 0;
  int frames_ = 0;
};

}  // namespace plrt::sdk
