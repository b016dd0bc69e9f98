// ReduceLROnPlateau (lr_scheduler.hpp): PyTorch 1.13's rule (best, bad periods, cooldown, eps).
#include <cmath>
#include <limits>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lr_scheduler.hpp>

#include "sdk_internal.hpp"

namespace pl {

namespace {

using plrt::sdk::num;

void require(bool ok, const std::string& what, const std::string& value, const char* valid) {
  if (!ok) throw Error(PL_ERR_INVALID_ARGUMENT, "ReduceLROnPlateau: " + what + " " + value + " is invalid; " + valid);
}

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions o)
    : opt_(optimizer), o_(std::move(o)) {
  require(o_.mode == "min" || o_.mode == "max", "mode", "'" + o_.mode + "'", "valid: min, max");
  require(o_.threshold_mode == "rel" || o_.threshold_mode == "abs", "threshold_mode", "'" + o_.threshold_mode + "'",
          "valid: rel, abs");
  require(o_.factor > 0 && o_.factor < 1, "factor", num(o_.factor), "it must be in (0, 1)");
  require(o_.patience >= 0, "patience", std::to_string(o_.patience), "it must be >= 0");
  require(o_.cooldown >= 0, "cooldown", std::to_string(o_.cooldown), "it must be >= 0");
  require(std::isfinite(o_.threshold) && o_.threshold >= 0, "threshold", num(o_.threshold), "it must be >= 0");
  require(std::isfinite(o_.min_lr) && o_.min_lr >= 0, "min_lr", num(o_.min_lr), "it must be >= 0");
  require(std::isfinite(o_.eps) && o_.eps >= 0, "eps", num(o_.eps), "it must be >= 0");
  const double inf = std::numeric_limits<double>::infinity();
  best_ = o_.mode == "min" ? inf : -inf;
}

bool ReduceLROnPlateau::better(double a) const {
  const bool rel = o_.threshold_mode == "rel";
  if (o_.mode == "min") return rel ? a < best_ * (1. - o_.threshold) : a < best_ - o_.threshold;
  return rel ? a > best_ * (o_.threshold + 1.) : a > best_ + o_.threshold;
}

void ReduceLROnPlateau::step(double value) {
  if (std::isnan(value))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "ReduceLROnPlateau: the monitored value is NaN at period " + std::to_string(last_epoch_ + 1));
  ++last_epoch_;
  if (better(value)) {
    best_ = value;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_ = 0;
  }
  if (num_bad_ > o_.patience) {
    const double old_lr = opt_.lr();
    const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
    if (old_lr - new_lr > o_.eps) opt_.set_lr(new_lr);
    cooldown_counter_ = o_.cooldown;
    num_bad_ = 0;
  }
}

std::map<std::string, double> ReduceLROnPlateau::state() const {
  return {{"last_epoch", static_cast<double>(last_epoch_)},
          {"best", best_},
          {"num_bad_epochs", static_cast<double>(num_bad_)},
          {"cooldown_counter", static_cast<double>(cooldown_counter_)},
          {"lr", opt_.lr()}};
}

void ReduceLROnPlateau::load_state(const std::map<std::string, double>& state) {
  for (const char* key : {"last_epoch", "best", "num_bad_epochs", "cooldown_counter", "lr"})
    if (!state.count(key))
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("ReduceLROnPlateau: the saved state has no '") + key + "'");
  for (const char* key : {"last_epoch", "num_bad_epochs", "cooldown_counter"}) {
    const double v = state.at(key);
    require(v >= 0 && v == std::floor(v), std::string("saved ") + key, num(v), "it must be an integer >= 0");
  }
  opt_.set_lr(state.at("lr"));
  last_epoch_ = static_cast<int64_t>(state.at("last_epoch"));
  best_ = state.at("best");
  num_bad_ = static_cast<int64_t>(state.at("num_bad_epochs"));
  cooldown_counter_ = static_cast<int64_t>(state.at("cooldown_counter"));
}

}  // namespace pl
