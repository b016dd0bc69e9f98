// pl::EarlyStopping (early_stopping.hpp): Lightning's rules, judged by each rank on its own value,
// decided by the ranks together (any rank's stop is every rank's) in two boolean collectives.
#include <cmath>
#include <cstdio>
#include <limits>
#include <plrt/sdk/early_stopping.hpp>
#include <plrt/sdk/trainer.hpp>

namespace pl {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string g(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : o_(std::move(options)) {
  if (o_.monitor.empty())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "EarlyStopping needs a monitor: the name of a logged value, e.g. \"val_loss\"");
  if (o_.mode != "min" && o_.mode != "max")
    throw Error(PL_ERR_INVALID_ARGUMENT, "EarlyStopping mode '" + o_.mode + "' is not valid; valid: min, max");
  if (o_.patience < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "EarlyStopping patience " + std::to_string(o_.patience) + " is not valid; valid: >= 0 checks");
  if (!std::isfinite(o_.min_delta))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "EarlyStopping min_delta " + g(o_.min_delta) + " is not valid; valid: a finite number");
  for (const auto& [name, v] : {std::pair{"stopping_threshold", o_.stopping_threshold},
                                std::pair{"divergence_threshold", o_.divergence_threshold}})
    if (v && std::isnan(*v))
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("EarlyStopping ") + name + " is NaN; valid: a number, or unset");
  best_ = o_.mode == "min" ? kInf : -kInf;
}

std::string EarlyStopping::state_key() const {
  return "EarlyStopping{monitor=" + o_.monitor + ", mode=" + o_.mode + "}";
}

HParams EarlyStopping::state_dict() const {
  return {{"wait_count", wait_},
          {"stopped_epoch", stopped_epoch_},
          {"best_score", best_},
          {"patience", o_.patience},
          {"stop_reason", reason_}};
}

void EarlyStopping::load_state_dict(const HParams& s) {
  auto num = [&](const char* k, double fallback) { return number_of(s, k, fallback); };
  wait_ = static_cast<int64_t>(num("wait_count", 0));
  stopped_epoch_ = static_cast<int64_t>(num("stopped_epoch", 0));
  best_ = num("best_score", best_);
  reason_ = string_of(s, "stop_reason");
  if (std::isnan(best_)) best_ = o_.mode == "min" ? kInf : -kInf;
}

// Lightning's _evaluate_stopping_criteria.
bool EarlyStopping::judge(double current, std::string& why) {
  const bool min = o_.mode == "min";
  auto better = [&](double a, double b) { return min ? a < b : a > b; };
  const double delta = min ? -std::fabs(o_.min_delta) : std::fabs(o_.min_delta);
  if (o_.check_finite && !std::isfinite(current)) {
    why = "monitored value " + o_.monitor + " = " + g(current) + " is not finite; previous best " + g(best_);
    return true;
  }
  if (o_.stopping_threshold && better(current, *o_.stopping_threshold)) {
    why = "monitored value " + o_.monitor + " = " + g(current) + " passed the stopping threshold " +
          g(*o_.stopping_threshold);
    return true;
  }
  if (o_.divergence_threshold && better(-current, -*o_.divergence_threshold)) {
    why = "monitored value " + o_.monitor + " = " + g(current) + " diverged past " + g(*o_.divergence_threshold);
    return true;
  }
  if (better(current - delta, best_)) {
    best_ = current;
    wait_ = 0;
    return false;
  }
  ++wait_;
  if (wait_ >= o_.patience) {
    why = "monitored value " + o_.monitor + " did not improve in the last " + std::to_string(wait_) + " checks; best " +
          g(best_);
    return true;
  }
  return false;
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, LightningBase&) {
  const TrainerOptions& o = trainer.options();
  if (o.fast_dev_run > 0) return;  // Lightning's: fast_dev_run checks nothing
  const bool by_default =
      !trainer.fit_has_validation() || (o.check_val_every_n_epoch == 1 && !trainer.validates_inside_epochs());
  if (trainer.acts_at_train_epoch_end(o_.check_on_train_epoch_end, by_default)) run_check(trainer, false);
}

// fit validating inside epochs (val_check_interval): each of its validations' ends, as Lightning's.
void EarlyStopping::on_validation_end(Trainer& trainer, LightningBase&) {
  if (trainer.options().fast_dev_run > 0) return;
  if (trainer.acts_at_validation_end(o_.check_on_train_epoch_end)) run_check(trainer, true);
}

void EarlyStopping::run_check(Trainer& trainer, bool inside_epoch) {
  const int rank = trainer.global_rank();
  const int64_t epoch = trainer.current_epoch();
  const std::map<std::string, double>& values = trainer.callback_metrics();
  bool stop = false;
  std::string why;
  auto it = values.find(o_.monitor);
  const bool missing = it == values.end();
  std::string logged;
  for (const auto& kv : values) logged += (logged.empty() ? "" : ", ") + kv.first;
  const std::string msg = "EarlyStopping is conditioned on '" + o_.monitor +
                          "', which was not logged; logged: " + (logged.empty() ? "(none)" : logged);
  if (missing && !o_.strict) {
    if (rank == 0 && !warned_)
      trainer.runtime().log(PL_LOG_WARN, msg + "; the check is skipped (strict=false), at this epoch and later ones");
    warned_ = true;
  } else if (!missing) {
    stop = judge(it->second, why);
  }
  if (o_.verbose && rank == 0 && !missing)
    trainer.runtime().log(PL_LOG_INFO, "EarlyStopping: epoch " + std::to_string(epoch) + ": " + o_.monitor + " = " +
                                           g(it->second) + ", best " + g(best_) + ", " + std::to_string(wait_) + "/" +
                                           std::to_string(o_.patience) + " without improvement");
  // Whether any rank misses the monitor (strict), then whether any rank would stop: every rank
  // fails, or stops, together.
  if (trainer.reduce_boolean_decision(missing && o_.strict, false))
    throw Error(
        PL_ERR_INVALID_ARGUMENT,
        (missing ? msg : "EarlyStopping is conditioned on '" + o_.monitor + "', which another rank did not log") +
            " (set strict=false to skip the check instead)");
  if (!trainer.reduce_boolean_decision(stop, false)) return;
  trainer.set_should_stop(true);
  stopped_epoch_ = epoch;
  reason_ = stop ? why : "another rank's " + o_.monitor + " met the stopping rule";
  if (rank == 0)
    trainer.runtime().log(
        PL_LOG_INFO, "EarlyStopping: " + reason_ + "; stopping after " +
                         (inside_epoch ? "step " + std::to_string(trainer.global_step()) + " of epoch " : "epoch ") +
                         std::to_string(epoch));
}

}  // namespace pl
