// The trainer's side of the progress bar (progress_bar.hpp): rank 0 only, the values logged with
// prog_bar (their _step and _epoch names too, as Lightning shows them), the epoch numbering of the
// per-epoch line.  The loops call progress_start / progress_step / progress_end and nothing more.
#include <algorithm>

#include "console_line.hpp"
#include "trainer_impl.hpp"

namespace pl {

// Impl's constructor, before the Runtime is made: where the bar goes, and on a terminal the log
// callback that draws log lines around it (when the program gave none).  `first_rank`: this
// process will be rank 0 (the launcher says so, or nobody launched it).
void Trainer::Impl::progress_setup(RuntimeOptions& r, bool first_rank) {
  bar_setup = plrt::sdk::ProgressBar::detect(o.enable_progress_bar);
  if (bar_setup.mode == plrt::sdk::ProgressBar::Mode::terminal && first_rank && r.log_callback == nullptr)
    r.log_callback = &plrt::sdk::ConsoleLine::log_callback, r.log_user = nullptr;
}

std::map<std::string, double> Trainer::Impl::progress_values() {
  const auto& values = settled();  // a frame is drawn at most 10 times a second
  std::map<std::string, double> out;
  for (const auto& name : metrics.prog_bar())
    for (const char* suffix : {"", "_step", "_epoch"})
      if (auto it = values.find(name + suffix); it != values.end()) out.insert(*it);
  return out;
}

void Trainer::Impl::progress_start(const char* stage, int64_t total, int64_t done) {
  if (rank != 0 || bar_setup.mode == plrt::sdk::ProgressBar::Mode::off) return;
  if (!bar) bar = std::make_unique<plrt::sdk::ProgressBar>(bar_setup);
  const int64_t last = o.max_epochs.value_or(0) > 0 ? *o.max_epochs - 1 : -1;
  bar->start(stage, epoch, last, total, done);
}

// Every batch: the values are gathered only when a frame is due (at most 10 a second).
void Trainer::Impl::progress_step(int64_t done) {
  if (!bar || !bar->open()) return;
  if (bar->due())
    bar->update(done, progress_values());
  else
    bar->advance(done);
}

bool Trainer::Impl::progress_end() {
  if (!bar || !bar->open()) return false;
  bar->finish(progress_values());
  return true;
}

void Trainer::Impl::progress_close() {
  if (bar) bar->close();
}

}  // namespace pl
