// pl::ModelCheckpoint: Lightning's ModelCheckpoint callback.  Saves checkpoint folders (the
// trainer's format: model.safetensors, optimizer state, trainer.json) named from a template, keeps
// the best save_top_k by a monitored value, and optionally `last`.
//
// When it checks: at the end of every every_n_epochs-th training epoch (after its validation, the
// module's on_train_epoch_end and the epoch's learning-rate step; with a validation loader that
// runs every check_val_every_n_epoch epochs, only at epochs that validated, unless
// save_on_train_epoch_end is true), or after every every_n_train_steps-th optimizer step instead
// (every_n_epochs is then 0 unless given).  An epoch-end checkpoint resumes at the next epoch.
// When fit validates inside epochs (TrainerOptions::val_check_interval not 1.0), it checks at the
// end of each of fit's validations instead (Lightning's rule), unless save_on_train_epoch_end is
// true; such a checkpoint resumes after the batch the validation followed.
//
// Ranks: rank 0 decides (its callback_metrics, its file system) and every rank learns the decision
// and the new top-k in one small collective, so that every rank calls the collective save alike
// and best_model_path() is the same on every rank.  Log the monitored value with sync_dist (or a
// pl::Metric) so that rank 0's value is the job's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <plrt/sdk/callback.hpp>
#include <string>

namespace pl {

struct ModelCheckpointOptions {
  std::string dirpath;  // "": <log_dir>/checkpoints (rank 0's lightning_logs/version_<n>/checkpoints)
  // "{epoch}-{step}" when empty.  "{name}" or "{name:spec}" is the value of epoch, step or a logged
  // value (0 when not logged), spec as Python's format (".3f", "03d", ".2e", "g").  With
  // auto_insert_metric_name each becomes "name=value" ("epoch=2-val_loss=0.31"); a folder that
  // exists gets "-v1", "-v2", ...  A name with '/' (a folder) is allowed.
  std::string filename;
  std::string monitor;       // a logged value; "": no monitor (save_top_k keeps the newest)
  std::string mode = "min";  // min | max: which values are better
  // The best k checkpoints kept (-1: all; 0: none, only `last`).  Without a monitor: -1, 0 or 1.
  int64_t save_top_k = 1;
  bool save_last = false;  // also <dirpath>/last at every check (a copy of the newest state)
  bool auto_insert_metric_name = true;
  bool verbose = false;                   // rank 0 logs each decision
  int64_t every_n_train_steps = 0;        // > 0: check after every n-th optimizer step
  std::optional<int64_t> every_n_epochs;  // unset: 1 (0 when every_n_train_steps is set)
  // unset: at an epoch's end only when validation ran in it (or there is no validation loader);
  // at each validation's end when fit validates inside epochs.  false: at validations' ends.
  std::optional<bool> save_on_train_epoch_end;
};

class ModelCheckpoint : public Callback {
 public:
  // Bad options are an error naming the value and what would be valid.
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  const ModelCheckpointOptions& options() const { return o_; }
  std::string best_model_path() const { return best_path_; }  // "" until one is saved
  double best_model_score() const { return best_score_; }     // NaN without a monitor / save
  std::string last_model_path() const { return last_path_; }  // the newest saved (or `last`)
  std::string kth_best_model_path() const { return kth_path_; }
  const std::map<std::string, double>& best_k_models() const { return best_k_; }  // path -> score
  // The folder name the template gives for these values (no folder, no "-vN").
  std::string format_checkpoint_name(const std::map<std::string, double>& values) const;

  std::string state_key() const override;
  HParams state_dict() const override;
  void load_state_dict(const HParams& state) override;
  bool monitors() const override { return true; }
  void setup(Trainer& trainer, LightningBase& module, const std::string& stage) override;
  void on_train_batch_end(Trainer& trainer, LightningBase& module, const Scalar& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, LightningBase& module) override;
  void on_validation_end(Trainer& trainer, LightningBase& module) override;

 private:
  void check(Trainer& trainer, bool at_epoch_end);
  bool better(double a, double b) const;
  ModelCheckpointOptions o_;
  int64_t every_n_epochs_ = 1;
  std::string dir_;  // resolved at setup (rank 0's; other ranks learn paths from rank 0)
  std::map<std::string, double> best_k_;
  std::string best_path_, kth_path_, last_path_;
  double best_score_;
  double kth_score_;
  int64_t last_step_saved_ = -1;
  bool warned_ = false;  // a monitor not logged yet is said once per fit
};

}  // namespace pl
