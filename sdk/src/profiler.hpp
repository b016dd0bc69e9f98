// The trainer's profiler (TrainerOptions::profiler): where a fit's time goes.
//
//   simple  per action: calls, mean, total and share of the fit (Lightning's SimpleProfiler
//           report), printed by rank 0 when fit ends and written by every rank to
//           <log dir>/profiler/fit-rank<r>.txt
//   trace   the same, and every span as a Chrome trace event (Trace Event Format, "ph": "X",
//           microseconds) in <log dir>/profiler/rank<r>.trace.json, one file per rank, for
//           Perfetto or chrome://tracing; process = rank, thread = the thread that timed it,
//           ts = microseconds since the rank's fit began (otherData.start_unix_us: that moment)
//
// Actions are named as Lightning's: run_training_epoch, run_training_batch,
// train_dataloader_next, [LightningModule]<type>.training_step, optimizer_step,
// [Strategy]<name>.<entry> (each call into the strategy plugin: its gradient synchronisation in
// after_backward, its optimizer_step, reduce, all_gather, sync_weights, ...), collective.<op> (a
// metric's collective on the process group), save_checkpoint, [Callback]<type>.<hook>.
//
// Cost: nothing when off (one branch).  On: a span is two steady_clock reads and, under a mutex,
// one hash lookup of its action and one 24-byte event (trace); a fit of 100k batches with ten
// spans each keeps ~24 MB of events.  Past kMaxEvents the trace keeps counting the table but
// stops storing events, and the file says how many it dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace plrt::sdk {

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Mode {
    off,
    simple,
    trace
  };
  static constexpr size_t kMaxEvents = 4'000'000;

  // "" or "none": off, "simple", "trace"; anything else is an error naming `what` and the valid names.
  static Mode parse(const std::string& text, const std::string& what);
  static const char* name(Mode m);

  // At a stage's start: forgets what an earlier one measured.
  void begin(Mode mode);
  bool on() const { return mode_ != Mode::off; }
  Mode mode() const { return mode_; }

  // Times its scope as `action` (nothing when the profiler is null or off).
  class Span {
   public:
    Span(Profiler* p, const char* action) : p_(p && p->on() ? p : nullptr) {
      if (p_) action_ = action, t0_ = Clock::now();
    }
    Span(Profiler* p, std::string action) : p_(p && p->on() ? p : nullptr) {
      if (p_) action_ = std::move(action), t0_ = Clock::now();
    }
    ~Span() {
      if (p_) p_->record(action_, t0_, Clock::now());
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Profiler* p_;
    std::string action_;
    Clock::time_point t0_;
  };

  void record(const std::string& action, Clock::time_point t0, Clock::time_point t1);

  // Lightning's report: "<STAGE> Profiler Report", then one row per action (the stage's total
  // first) sorted by total time; shares are of `total_s`, the stage's wall-clock time.
  std::string table(const std::string& stage, double total_s) const;
  // The Trace Event Format document of this rank (events sorted by start, a parent before its
  // children), with the rank as process and its name as metadata.
  std::string trace_json(int rank) const;
  size_t events() const;

 private:
  struct Stat {
    int64_t calls = 0;
    double total_s = 0;
  };
  struct Event {
    uint32_t action, thread;
    int64_t start_ns, dur_ns;
  };
  uint32_t thread_index();  // under mu_

  Mode mode_ = Mode::off;
  Clock::time_point t0_{};
  int64_t wall0_us_ = 0;  // system clock at begin(), written into the trace's otherData
  mutable std::mutex mu_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Stat> stats_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
  std::vector<std::thread::id> threads_;
};

}  // namespace plrt::sdk
