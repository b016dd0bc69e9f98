// OneCycleLR (lr_scheduler.hpp): PyTorch 1.13's phases, annealing functions and momentum cycling.
// Unlike the chainable schedules, each value is computed from the step number alone.
#include <cmath>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lr_scheduler.hpp>

#include "sdk_internal.hpp"

namespace pl {

namespace {

using plrt::sdk::num;

constexpr double kPi = 3.14159265358979323846;
enum {
  kInitial = 0,
  kMax = 1,
  kMin = 2
};  // values_lr_
enum {
  kMaxMomentum = 0,
  kBaseMomentum = 1
};  // values_momentum_

void require(bool ok, const std::string& what, const std::string& value, const char* valid) {
  if (!ok) throw Error(PL_ERR_INVALID_ARGUMENT, "OneCycleLR: " + what + " " + value + " is invalid; " + valid);
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleOptions o) : LRScheduler(optimizer), o_(std::move(o)) {
  require(std::isfinite(o_.max_lr) && o_.max_lr > 0, "max_lr", num(o_.max_lr), "it must be finite and > 0");
  require(o_.total_steps >= 1, "total_steps", std::to_string(o_.total_steps), "it must be >= 1");
  require(o_.pct_start >= 0 && o_.pct_start <= 1, "pct_start", num(o_.pct_start), "it must be in [0, 1]");
  require(o_.anneal_strategy == "cos" || o_.anneal_strategy == "linear", "anneal_strategy",
          "'" + o_.anneal_strategy + "'", "valid: cos, linear");
  require(std::isfinite(o_.div_factor) && o_.div_factor > 0, "div_factor", num(o_.div_factor), "it must be > 0");
  require(std::isfinite(o_.final_div_factor) && o_.final_div_factor > 0, "final_div_factor", num(o_.final_div_factor),
          "it must be > 0");
  if (o_.cycle_momentum && !optimizer.has_momentum())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "OneCycleLR: cycle_momentum needs an optimizer with a momentum (SGD) or "
                "beta1 (Adam, AdamW); " +
                    optimizer.name() + " has neither: set cycle_momentum = false");
  const double total = static_cast<double>(o_.total_steps);
  if (o_.three_phase)
    phases_ = {{o_.pct_start * total - 1, kInitial, kMax, kMaxMomentum, kBaseMomentum},
               {2 * o_.pct_start * total - 2, kMax, kInitial, kBaseMomentum, kMaxMomentum},
               {total - 1, kInitial, kMin, kMaxMomentum, kMaxMomentum}};
  else
    phases_ = {{o_.pct_start * total - 1, kInitial, kMax, kMaxMomentum, kBaseMomentum},
               {total - 1, kMax, kMin, kBaseMomentum, kMaxMomentum}};
  values_lr_[kInitial] = o_.max_lr / o_.div_factor;
  values_lr_[kMax] = o_.max_lr;
  values_lr_[kMin] = values_lr_[kInitial] / o_.final_div_factor;
  values_momentum_[kMaxMomentum] = o_.max_momentum;
  values_momentum_[kBaseMomentum] = o_.base_momentum;
  // PyTorch's base_lrs are the groups' initial_lr, which OneCycleLR sets to max_lr / div_factor.
  base_lr_ = values_lr_[kInitial];
  if (o_.cycle_momentum) optimizer.set_momentum(o_.max_momentum);  // checks the values
  initial_step();
}

double OneCycleLR::next_lr(double) {
  if (last_epoch_ > o_.total_steps)
    throw Error(PL_ERR_INVALID_ARGUMENT, "OneCycleLR: stepped " + std::to_string(last_epoch_) +
                                             " times, past total_steps " + std::to_string(o_.total_steps) +
                                             " (give total_steps = every optimizer step of the run)");
  auto anneal = [&](double start, double end, double pct) {
    if (o_.anneal_strategy == "cos") return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
    return (end - start) * pct + start;
  };
  const double step = static_cast<double>(last_epoch_);
  double start_step = 0, lr = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (step <= p.end_step || i + 1 == phases_.size()) {
      const double pct = (step - start_step) / (p.end_step - start_step);
      lr = anneal(values_lr_[p.start_lr], values_lr_[p.end_lr], pct);
      if (o_.cycle_momentum) {
        last_momentum_ = anneal(values_momentum_[p.start_momentum], values_momentum_[p.end_momentum], pct);
        opt_.set_momentum(last_momentum_);
      }
      break;
    }
    start_step = p.end_step;
  }
  return lr;
}

}  // namespace pl
