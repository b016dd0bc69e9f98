// pl::EarlyStopping: Lightning's EarlyStopping callback.  At the end of a training epoch (after its
// validation and the module's on_train_epoch_end) it compares the monitored value with the best so
// far; after `patience` checks without an improvement of more than min_delta, or once the value
// passes stopping_threshold (or divergence_threshold, or is not finite), it asks the trainer to stop.
// When fit validates inside epochs (TrainerOptions::val_check_interval not 1.0) it checks at the
// end of each of fit's validations instead, unless check_on_train_epoch_end is true, and fit stops
// right after the validation that decided it (Lightning's rule).
//
// Ranks: each rank judges its own value (as Lightning does), then the ranks decide together in one
// collective: if any rank would stop, every rank stops after the same epoch, so no rank stops
// alone and leaves the others waiting in a collective.
#pragma once

#include <cstdint>
#include <optional>
#include <plrt/sdk/callback.hpp>
#include <string>

namespace pl {

struct EarlyStoppingOptions {
  std::string monitor;                         // a logged value, e.g. "val_loss" (required)
  double min_delta = 0;                        // an improvement must exceed |min_delta|
  int64_t patience = 3;                        // checks without improvement before stopping (>= 0)
  std::string mode = "min";                    // min | max
  bool strict = true;                          // a monitor that was not logged: error (false: warn and skip the check)
  bool check_finite = true;                    // stop when the value is NaN or infinite
  std::optional<double> stopping_threshold{};  // stop once the value is better than this
  std::optional<double> divergence_threshold{};  // stop once the value is worse than this
  // unset: at epochs that validated (every epoch when validation runs every epoch or not at all);
  // at each validation's end when fit validates inside epochs.  false: at validations' ends there.
  std::optional<bool> check_on_train_epoch_end{};
  bool verbose = false;  // rank 0 logs each check
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);  // bad options: an error naming them

  const EarlyStoppingOptions& options() const { return o_; }
  int64_t wait_count() const { return wait_; }
  int64_t stopped_epoch() const { return stopped_epoch_; }  // 0 until it stopped training
  double best_score() const { return best_; }               // +inf (min) / -inf (max) at first
  std::string stop_reason() const { return reason_; }

  std::string state_key() const override;
  HParams state_dict() const override;
  void load_state_dict(const HParams& state) override;
  bool monitors() const override { return true; }
  void on_train_epoch_end(Trainer& trainer, LightningBase& module) override;
  void on_validation_end(Trainer& trainer, LightningBase& module) override;

 private:
  void run_check(Trainer& trainer, bool inside_epoch);  // inside_epoch: at a validation inside an epoch
  // This rank's verdict on `value` (updates best_ and wait_); the reason when it says stop.
  bool judge(double value, std::string& why);
  EarlyStoppingOptions o_;
  double best_;
  int64_t wait_ = 0, stopped_epoch_ = 0;
  std::string reason_;
  bool warned_ = false;  // a missing monitor (strict false) is said once
};

}  // namespace pl
