// TrainerOptions from the environment (PL_TRAINER_* overrides, PL_RESTART_COUNT) and their checks,
// both before any work: a bad value is an error naming it and what would be valid.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <plrt/sdk/options.hpp>

#include "job_session.hpp"
#include "loggers.hpp"
#include "trainer_impl.hpp"

namespace pl {

namespace {

int64_t parse_int(const std::string& var, const std::string& text, int64_t lo) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || errno == ERANGE)  // ERANGE: past int64, not saturated silently
    throw Error(PL_ERR_INVALID_ARGUMENT, var + "='" + text + "' is not valid: it must be an integer " +
                                             std::to_string(lo) + "..9223372036854775807");
  return v;
}

// A seed: 0..2^64-1, as plrt-mlp --seed and seed_everything take (digits only: strtoull would
// wrap "-1" to 2^64-1).
uint64_t parse_seed(const std::string& var, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || *end != '\0' || errno == ERANGE)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                var + "='" + text + "' is not valid: it must be an integer 0..18446744073709551615");
  return v;
}

double parse_double(const std::string& var, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    throw Error(PL_ERR_INVALID_ARGUMENT, var + "='" + text + "' is not valid: it must be a number");
  return v;
}

}  // namespace

// PL_TRAINER_<FLAG> overrides the program's value, as Lightning's env defaults do: plrun sets the
// flags given on its command line.
void Trainer::Impl::apply_env_overrides() {
  auto str = [](const char* var, std::string& field) {
    if (const char* v = std::getenv(var); v && *v) field = v;
  };
  auto i64 = [](const char* var, auto& field, int64_t lo) {
    if (const char* v = std::getenv(var); v && *v)
      field = static_cast<std::decay_t<decltype(field)>>(parse_int(var, v, lo));
  };
  {  // the Lightning knobs, read as every driver reads them (job_session.hpp)
    JobRequest knobs = request();
    plrt::sdk::apply_knob_env(knobs);
    o.accelerator = knobs.accelerator, o.devices = knobs.devices, o.strategy = knobs.strategy;
    o.num_nodes = knobs.num_nodes, o.precision = knobs.precision;
    o.process_group_backend = knobs.process_group_backend, o.strategy_options = knobs.strategy_options;
  }
  if (const char* v = std::getenv("PL_TRAINER_MAX_EPOCHS"); v && *v)
    o.max_epochs = parse_int("PL_TRAINER_MAX_EPOCHS", v, -1);
  i64("PL_TRAINER_MAX_STEPS", o.max_steps, -1);
  i64("PL_TRAINER_ACCUMULATE_GRAD_BATCHES", o.accumulate_grad_batches, 1);
  if (const char* v = std::getenv("PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH"); v && *v) {  // N or Lightning's None
    const std::string t = v;
    if (t == "None" || t == "none")
      o.check_val_every_n_epoch.reset();
    else if (const int64_t n = parse_int("PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH", t, 1); n <= INT32_MAX)
      o.check_val_every_n_epoch = static_cast<int>(n);
    else
      throw Error(PL_ERR_INVALID_ARGUMENT, "PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH='" + t +
                                               "' is not valid: it must be an integer 1..2147483647 or None");
  }
  if (const char* v = std::getenv("PL_TRAINER_PROFILER"); v && *v) {
    plrt::sdk::Profiler::parse(v, "PL_TRAINER_PROFILER");  // names the variable when it is wrong
    o.profiler = v;
  }
  if (const char* v = std::getenv("PL_TRAINER_VAL_CHECK_INTERVAL"); v && *v)
    o.val_check_interval = BatchLimit::parse("PL_TRAINER_VAL_CHECK_INTERVAL", v);
  if (const char* v = std::getenv("PL_TRAINER_GRADIENT_CLIP_VAL"); v && *v)
    o.gradient_clip_val = parse_double("PL_TRAINER_GRADIENT_CLIP_VAL", v);
  str("PL_TRAINER_GRADIENT_CLIP_ALGORITHM", o.gradient_clip_algorithm);
  if (const char* v = std::getenv("PL_TRAINER_LOGGER"); v && *v) {
    plrt::sdk::parse_logger_names(v, "PL_TRAINER_LOGGER");  // names the variable when it is wrong
    o.logger = v;
  }
  if (const char* v = std::getenv("PL_TRAINER_CHECKPOINT_ON_SIGTERM"); v && *v) {
    const std::string t = v;
    if (t != "0" && t != "1")
      throw Error(PL_ERR_INVALID_ARGUMENT, "PL_TRAINER_CHECKPOINT_ON_SIGTERM='" + t + "' is not valid: use 0 or 1");
    o.checkpoint_on_sigterm = t == "1";
  }
  for (auto [var, field] : {std::pair{"PL_TRAINER_ENABLE_PROGRESS_BAR", &o.enable_progress_bar},
                            std::pair{"PL_TRAINER_ENABLE_MODEL_SUMMARY", &o.enable_model_summary}})
    if (const char* v = std::getenv(var); v && *v) {
      const std::string t = v;
      if (t != "0" && t != "1")
        throw Error(PL_ERR_INVALID_ARGUMENT, std::string(var) + "='" + t + "' is not valid: use 0 or 1");
      *field = t == "1";
    }
  i64("PL_TRAINER_CHECKPOINT_EVERY_N_STEPS", o.checkpoint_every_n_steps, 0);
  if (const char* v = std::getenv("PL_TRAINER_CHECKPOINT_EVERY_SECONDS"); v && *v) {
    o.checkpoint_every_seconds = parse_double("PL_TRAINER_CHECKPOINT_EVERY_SECONDS", v);
    if (!std::isfinite(o.checkpoint_every_seconds) || o.checkpoint_every_seconds < 0)
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("PL_TRAINER_CHECKPOINT_EVERY_SECONDS='") + v +
                                               "' is not valid: it must be a finite number >= 0 (0: off)");
  }
  // Seconds (plrun --timeout): each collective and store wait; 0 keeps the default (30 minutes).
  if (const char* v = std::getenv("PL_TRAINER_TIMEOUT"); v && *v) {
    const double s = parse_double("PL_TRAINER_TIMEOUT", v);
    if (!std::isfinite(s) || s < 0 || s > 1e9)
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("PL_TRAINER_TIMEOUT='") + v +
                                               "' is not valid: give seconds, a finite number >= 0 (0: the default, "
                                               "30 minutes)");
    o.timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000));
  }
  // Set by the launcher (plrun --max-restarts, torchelastic's TORCHELASTIC_RESTART_COUNT's role).
  i64("PL_RESTART_COUNT", restart_count, 0);
  job_key = job_key_of(std::getenv("PL_JOB_TOKEN"));
  if (const char* v = std::getenv("PL_TRAINER_SEED"); v && *v) o.seed = parse_seed("PL_TRAINER_SEED", v);
  // the loop's limits (trainer_limits.cpp)
  if (const char* v = std::getenv("PL_TRAINER_MIN_EPOCHS"); v && *v)
    o.min_epochs = parse_int("PL_TRAINER_MIN_EPOCHS", v, 0);
  i64("PL_TRAINER_MIN_STEPS", o.min_steps, -1);
  i64("PL_TRAINER_LOG_EVERY_N_STEPS", o.log_every_n_steps, 1);
  i64("PL_TRAINER_NUM_SANITY_VAL_STEPS", o.num_sanity_val_steps, -1);
  for (auto [var, field] : {std::pair{"PL_TRAINER_LIMIT_TRAIN_BATCHES", &o.limit_train_batches},
                            std::pair{"PL_TRAINER_LIMIT_VAL_BATCHES", &o.limit_val_batches},
                            std::pair{"PL_TRAINER_LIMIT_TEST_BATCHES", &o.limit_test_batches},
                            std::pair{"PL_TRAINER_LIMIT_PREDICT_BATCHES", &o.limit_predict_batches}})
    if (const char* v = std::getenv(var); v && *v) *field = BatchLimit::parse(var, v);
  if (const char* v = std::getenv("PL_TRAINER_FAST_DEV_RUN"); v && *v) {  // Lightning's bool or int
    const std::string t = v;
    o.fast_dev_run = t == "true" ? 1 : t == "false" ? 0 : parse_int("PL_TRAINER_FAST_DEV_RUN", t, 0);
  }
}

void Trainer::Impl::check_options() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error(PL_ERR_INVALID_ARGUMENT, what);
  };
  need(o.max_epochs.value_or(-1) >= -1,
       "max_epochs=" + std::to_string(o.max_epochs.value_or(-1)) + " is not valid: use -1 (no limit) or >= 0");
  need(o.max_steps >= -1, "max_steps=" + std::to_string(o.max_steps) + " is not valid: use -1 (no limit) or >= 0");
  need(o.accumulate_grad_batches >= 1,
       "accumulate_grad_batches=" + std::to_string(o.accumulate_grad_batches) + " is not valid: it must be >= 1");
  need(o.check_val_every_n_epoch.value_or(1) >= 1,
       "check_val_every_n_epoch=" + std::to_string(o.check_val_every_n_epoch.value_or(1)) +
           " is not valid: it must be >= 1 (unset: Lightning's None)");
  const BatchLimit& every = o.val_check_interval;
  need(every.is_fraction() ? std::isfinite(every.fraction()) && every.fraction() >= 0.0 && every.fraction() <= 1.0
                           : every.count() >= 1,
       "val_check_interval=" + o.val_check_interval.text() +
           " is not valid: give a count of training batches >= 1 (e.g. 100) or a fraction of the epoch in [0, 1] "
           "(e.g. 0.25; 1.0, the default, is once an epoch)");
  need(o.check_val_every_n_epoch || !o.val_check_interval.is_fraction(),
       "val_check_interval=" + o.val_check_interval.text() +
           " is a fraction of an epoch, but check_val_every_n_epoch is unset (None: batches counted across epochs); "
           "give val_check_interval a count of batches, or set check_val_every_n_epoch");
  need(o.log_every_n_steps >= 1,
       "log_every_n_steps=" + std::to_string(o.log_every_n_steps) + " is not valid: it must be >= 1");
  need(std::isfinite(o.gradient_clip_val) && o.gradient_clip_val >= 0,
       "gradient_clip_val=" + plrt::sdk::num(o.gradient_clip_val) +
           " is not valid: it must be a finite number >= 0 (0: no clipping)");
  need(o.gradient_clip_algorithm == "norm" || o.gradient_clip_algorithm == "value",
       "gradient_clip_algorithm='" + o.gradient_clip_algorithm + "' is not valid; valid: norm, value");
  plrt::sdk::parse_logger_names(o.logger, "logger");
  plrt::sdk::Profiler::parse(o.profiler, "profiler");
  need(o.min_epochs.value_or(0) >= 0,
       "min_epochs=" + std::to_string(o.min_epochs.value_or(0)) + " is not valid: it must be >= 0 (unset: no minimum)");
  need(o.min_steps >= -1, "min_steps=" + std::to_string(o.min_steps) + " is not valid: use -1 (no minimum) or >= 0");
  need(o.num_sanity_val_steps >= -1, "num_sanity_val_steps=" + std::to_string(o.num_sanity_val_steps) +
                                         " is not valid: use -1 (every validation batch), 0 (none) or a count");
  need(o.fast_dev_run >= 0, "fast_dev_run=" + std::to_string(o.fast_dev_run) +
                                " is not valid: it must be >= 0 (0: off; N: N batches of each loop)");
  o.limit_train_batches.check("limit_train_batches");
  o.limit_val_batches.check("limit_val_batches");
  o.limit_test_batches.check("limit_test_batches");
  o.limit_predict_batches.check("limit_predict_batches");
  need(o.timeout.count() >= 0, "timeout=" + std::to_string(o.timeout.count()) +
                                   " ms is not valid: it must be >= 0 (0: the default, 30 minutes)");
  need(o.checkpoint_every_n_steps >= 0, "checkpoint_every_n_steps=" + std::to_string(o.checkpoint_every_n_steps) +
                                            " is not valid: it must be >= 0 (0: off)");
  need(std::isfinite(o.checkpoint_every_seconds) && o.checkpoint_every_seconds >= 0,
       "checkpoint_every_seconds=" + plrt::sdk::num(o.checkpoint_every_seconds) +
           " is not valid: it must be a finite number >= 0 (0: off)");
  need(o.enable_checkpointing || (o.checkpoint_every_n_steps == 0 && o.checkpoint_every_seconds == 0),
       "checkpoint_every_n_steps=" + std::to_string(o.checkpoint_every_n_steps) +
           " / checkpoint_every_seconds=" + plrt::sdk::num(o.checkpoint_every_seconds) +
           " ask for checkpoints but enable_checkpointing is false; turn it on or set both to 0");
}

}  // namespace pl
