// The chainable learning-rate schedules (lr_scheduler.hpp): the base's step and checkpoint state,
// and StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR, each next value computed
// from the optimizer's current one as PyTorch 1.13's get_lr() does (so the rounding is the same).
// OneCycleLR is in one_cycle_lr.cpp, ReduceLROnPlateau in reduce_lr_on_plateau.cpp.
#include <cmath>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lr_scheduler.hpp>

#include "sdk_internal.hpp"

namespace pl {

namespace {

using plrt::sdk::num;

constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

void require(bool ok, const std::string& who, const std::string& what, const std::string& value, const char* valid) {
  if (!ok) throw Error(PL_ERR_INVALID_ARGUMENT, who + ": " + what + " " + value + " is invalid; " + valid);
}

// Python's a % m for m > 0: never negative.
int64_t py_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer), base_lr_(optimizer.lr()) {}

LRScheduler::~LRScheduler() = default;

void LRScheduler::initial_step() { step(); }

void LRScheduler::step() {
  ++last_epoch_;
  const double lr = next_lr(opt_.lr());
  opt_.set_lr(lr);
  last_lr_ = lr;
}

std::map<std::string, double> LRScheduler::state() const {
  return {{"last_epoch", static_cast<double>(last_epoch_)}, {"base_lr", base_lr_}, {"last_lr", last_lr_}};
}

void LRScheduler::load_state(const std::map<std::string, double>& state) {
  for (const char* key : {"last_epoch", "base_lr", "last_lr"})
    if (!state.count(key)) throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": the saved state has no '" + key + "'");
  const double epoch = state.at("last_epoch");
  require(epoch >= 0 && epoch == std::floor(epoch), name(), "saved last_epoch", num(epoch),
          "it must be an integer >= 0");
  require(std::isfinite(state.at("last_lr")) && state.at("last_lr") >= 0, name(), "saved last_lr",
          num(state.at("last_lr")), "it must be finite and >= 0");
  opt_.set_lr(state.at("last_lr"));
  last_epoch_ = static_cast<int64_t>(epoch);
  base_lr_ = state.at("base_lr");
  last_lr_ = state.at("last_lr");
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  require(step_size >= 1, "StepLR", "step_size", std::to_string(step_size), "it must be >= 1");
  require(std::isfinite(gamma) && gamma > 0, "StepLR", "gamma", num(gamma), "it must be finite and > 0");
  initial_step();
}

double StepLR::next_lr(double lr) {
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lr;
  return lr * gamma_;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  for (int64_t m : milestones) {
    require(m >= 1, "MultiStepLR", "milestone", std::to_string(m), "every milestone must be >= 1");
    ++milestones_[m];
  }
  require(std::isfinite(gamma) && gamma > 0, "MultiStepLR", "gamma", num(gamma), "it must be finite and > 0");
  initial_step();
}

double MultiStepLR::next_lr(double lr) {
  auto it = milestones_.find(last_epoch_);
  if (it == milestones_.end()) return lr;
  return lr * std::pow(gamma_, it->second);
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  require(std::isfinite(gamma) && gamma > 0, "ExponentialLR", "gamma", num(gamma), "it must be finite and > 0");
  initial_step();
}

double ExponentialLR::next_lr(double lr) { return last_epoch_ == 0 ? lr : lr * gamma_; }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  require(t_max >= 1, "CosineAnnealingLR", "t_max", std::to_string(t_max), "it must be >= 1");
  require(std::isfinite(eta_min) && eta_min >= 0, "CosineAnnealingLR", "eta_min", num(eta_min),
          "it must be finite and >= 0");
  initial_step();
}

double CosineAnnealingLR::next_lr(double lr) {
  const double t = static_cast<double>(t_max_);
  const double e = static_cast<double>(last_epoch_);
  if (last_epoch_ == 0) return lr;
  if (py_mod(last_epoch_ - 1 - t_max_, 2 * t_max_) == 0)
    return lr + (base_lr_ - eta_min_) * (1 - std::cos(kPi / t)) / 2;
  return (1 + std::cos(kPi * e / t)) / (1 + std::cos(kPi * (e - 1) / t)) * (lr - eta_min_) + eta_min_;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_iters_(total_iters) {
  require(start_factor > 0 && start_factor <= 1, "LinearLR", "start_factor", num(start_factor), "it must be in (0, 1]");
  require(end_factor >= 0 && end_factor <= 1, "LinearLR", "end_factor", num(end_factor), "it must be in [0, 1]");
  require(total_iters >= 1, "LinearLR", "total_iters", std::to_string(total_iters), "it must be >= 1");
  initial_step();
}

double LinearLR::next_lr(double lr) {
  if (last_epoch_ == 0) return lr * start_;
  if (last_epoch_ > total_iters_) return lr;
  const double e = static_cast<double>(last_epoch_);
  return lr * (1. + (end_ - start_) / (static_cast<double>(total_iters_) * start_ + (e - 1) * (end_ - start_)));
}

}  // namespace pl
