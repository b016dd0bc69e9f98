// Lightning's loop limits: limit_{train,val,test}_batches (BatchLimit), fast_dev_run, and
// min_epochs / min_steps holding should_stop back.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "trainer_impl.hpp"

namespace pl {

namespace {

std::string valid_forms(const std::string& what) {
  return what + " takes a count of batches (an integer >= 0, e.g. 10) or a fraction of the loader (a number in " +
         "[0, 1] written with a '.', e.g. 0.25; 1.0 is every batch)";
}

}  // namespace

BatchLimit BatchLimit::parse(const std::string& what, const std::string& text) {
  const bool integer = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  if (integer) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE)
      throw Error(PL_ERR_INVALID_ARGUMENT, what + "='" + text + "' is not valid: " + valid_forms(what));
    return BatchLimit(static_cast<int64_t>(v));
  }
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || text.find_first_of(".eE") == std::string::npos || !std::isfinite(v) || v < 0.0 ||
      v > 1.0)
    throw Error(PL_ERR_INVALID_ARGUMENT, what + "='" + text + "' is not valid: " + valid_forms(what));
  return BatchLimit(v);
}

std::string BatchLimit::text() const {
  if (!fraction_) return std::to_string(count_);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", value_);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 1 -> 1.0: still a fraction as text
  return s;
}

void BatchLimit::check(const std::string& what) const {
  if (fraction_ ? !(std::isfinite(value_) && value_ >= 0.0 && value_ <= 1.0) : count_ < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, what + "=" + text() + " is not valid: " + valid_forms(what));
}

int64_t BatchLimit::of(int64_t n, const std::string& what) const {
  check(what);
  if (!fraction_) return std::min(n, count_);
  const auto k = static_cast<int64_t>(std::floor(static_cast<double>(n) * value_));  // Lightning's int(n * f)
  if (k == 0 && value_ > 0.0 && n > 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, what + "=" + text() + " of a loader with " + std::to_string(n) +
                                             " batch(es) leaves none (" + text() + " x " + std::to_string(n) +
                                             " < 1); raise it, or give a count such as " + what + "=1");
  return k;
}

// Before the job is resolved: what fast_dev_run overrides.  Its note comes once the rank is known.
void Trainer::Impl::apply_fast_dev_run() {
  if (o.fast_dev_run <= 0) return;
  const BatchLimit n(o.fast_dev_run);
  o.limit_train_batches = o.limit_val_batches = o.limit_test_batches = o.limit_predict_batches = n;
  o.max_steps = o.fast_dev_run;
  o.max_epochs = 1;
  o.check_val_every_n_epoch = 1;
  o.val_check_interval = 1.0;
  o.enable_checkpointing = false;  // and no log folder (open_log_dir), ModelCheckpoint and EarlyStopping skip
  o.checkpoint_every_n_steps = 0;
  o.checkpoint_every_seconds = 0;
  o.checkpoint_on_sigterm = false;
}

void Trainer::Impl::note_fast_dev_run() const {
  if (o.fast_dev_run > 0 && rank == 0)
    info("Running in fast_dev_run mode: will run the requested loop using " + std::to_string(o.fast_dev_run) +
         " batch(es). Logging and checkpointing is suppressed.");
}

// should_stop may end fit once min_epochs epochs have finished and min_steps steps been taken.
bool Trainer::Impl::can_stop_early() {
  const bool met = epoch >= o.min_epochs.value_or(0) && step >= o.min_steps;
  if (!met && should_stop && !min_note_given && rank == 0) {
    info("Trainer was signaled to stop but the required min_epochs=" + std::to_string(o.min_epochs.value_or(0)) +
         " or min_steps=" + std::to_string(std::max<int64_t>(o.min_steps, 0)) +
         " has not been met. Training will continue...");
    min_note_given = true;
  }
  return met;
}

// Lightning's _run_sanity_check: after on_fit_start, before on_train_start.
void Trainer::Impl::sanity_check(DataLoader* val) {
  if (!val || o.num_sanity_val_steps == 0 || o.fast_dev_run > 0 || !validates_in_epoch()) return;
  LightningBase& m = *module;
  sanity_checking = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{sanity_checking};
  each_callback("on_sanity_check_start", [&](Callback& c) { c.on_sanity_check_start(*self, m); });
  eval_loop(*val, false, true);
  each_callback("on_sanity_check_end", [&](Callback& c) { c.on_sanity_check_end(*self, m); });
}

}  // namespace pl
