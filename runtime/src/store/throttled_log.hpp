// Warnings that a flood could repeat thousands of times a second (connections dropped, accept
// failures) are rate-limited: the first one of a period is logged at once, the ones after it are
// counted and logged as one summary line when the period ends.  Throttle is the counting (pure,
// the time is given); ThrottledWarning adds the timer and the logger, on the server's io thread.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace plrt::store {

class Throttle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Throttle(Clock::duration period) : period_(period) {}

  // An event at `now`: true when it may be logged now, false when it was counted instead.
  bool allow(Clock::time_point now);
  // The events counted since the last line (then 0); the summary line written now counts as the
  // period's line, so a steady flood gives one line per period.
  uint64_t take(Clock::time_point now);
  uint64_t counted() const { return counted_; }
  Clock::time_point period_end() const { return start_ + period_; }
  Clock::duration period() const { return period_; }

 private:
  Clock::duration period_;
  Clock::time_point start_{};
  bool started_ = false;
  uint64_t counted_ = 0;
};

class ThrottledWarning {
 public:
  // `summary(n)` words the line for n events counted during a period.
  ThrottledWarning(boost::asio::io_context& io, std::shared_ptr<spdlog::logger> log, Throttle::Clock::duration period,
                   std::function<std::string(uint64_t)> summary)
      : timer_(io), log_(std::move(log)), throttle_(period), summary_(std::move(summary)) {}

  // Logs `line` now, or counts it for the summary at the end of the period.
  void warn(const std::string& line);
  // Logs what was counted and stops the timer (the server's shutdown).
  void flush();

 private:
  boost::asio::steady_timer timer_;
  std::shared_ptr<spdlog::logger> log_;
  Throttle throttle_;
  std::function<std::string(uint64_t)> summary_;
  bool armed_ = false;
};

}  // namespace plrt::store
