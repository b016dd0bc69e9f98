// Rate-limited warnings (see throttled_log.hpp).
#include "store/throttled_log.hpp"

namespace plrt::store {

bool Throttle::allow(Clock::time_point now) {
  if (!started_ || (now - start_ >= period_ && counted_ == 0)) {
    started_ = true;
    start_ = now;
    return true;
  }
  ++counted_;  // within the period, or past it with a summary still due
  return false;
}

uint64_t Throttle::take(Clock::time_point now) {
  uint64_t n = counted_;
  counted_ = 0;
  started_ = true;
  start_ = now;
  return n;
}

void ThrottledWarning::warn(const std::string& line) {
  if (throttle_.allow(Throttle::Clock::now())) {
    log_->warn("{}", line);
    return;
  }
  if (armed_) return;
  armed_ = true;
  timer_.expires_at(throttle_.period_end());
  timer_.async_wait([this](const boost::system::error_code& ec) {
    armed_ = false;
    if (ec) return;
    if (uint64_t n = throttle_.take(Throttle::Clock::now())) log_->warn("{}", summary_(n));
  });
}

void ThrottledWarning::flush() {
  timer_.cancel();
  if (uint64_t n = throttle_.take(Throttle::Clock::now())) log_->warn("{}", summary_(n));
}

}  // namespace plrt::store
