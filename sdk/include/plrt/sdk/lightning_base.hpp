// pl::LightningBase: what every kind of Lightning module shares, whatever its tensors are:
// Lightning's hooks, configure_callbacks, log (sync_dist, prog_bar, on_step / on_epoch,
// reduce_fx), all_gather, save_hyperparameters and the link to its trainer.  Callbacks receive it,
// and pl::Trainer's fit / validate / test / predict take it.  The module kinds derive from it:
//
//   pl::LightningModule         plrt's own layers (lightning_module.hpp)
//   pl::torch::LightningModule  a libtorch module (plrt/torch/lightning.hpp)
//
// Each kind gives the trainer its model through trainer_model() (trainer_model.hpp): the one place
// where the trainer meets the kind's parameters, steps and state.
#pragma once

#include <memory>
#include <optional>
#include <plrt/sdk/callback.hpp>
#include <plrt/sdk/hparams.hpp>
#include <plrt/sdk/scalar.hpp>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <vector>

namespace plrt::sdk {
class ModuleModel;
class ModuleLink;
}  // namespace plrt::sdk

namespace pl {

class Trainer;
class TrainerModel;
class Metric;

enum class Reduce {
  Mean,
  Sum,
  Min,
  Max
};

struct LogOptions {
  // Defaults as Lightning's: in training_step on_step, elsewhere on_epoch.  With both, the names
  // get "_step" and "_epoch" suffixes.
  std::optional<bool> on_step;
  std::optional<bool> on_epoch;
  bool sync_dist = false;  // reduce across ranks (epoch values weighted by batch size)
  Reduce reduce_fx = Reduce::Mean;
  bool rank_zero_only = false;  // logged by rank 0 only; cannot be synced
  bool prog_bar = false;        // also shown on rank 0's console line
  int64_t batch_size = -1;      // epoch-mean weight; default: the current batch's size
};

class LightningBase {
 public:
  LightningBase() = default;
  // A module destroyed before its trainer unhooks itself from it (and the trainer's destructor
  // unhooks its module): either may outlive the other.
  virtual ~LightningBase();
  LightningBase(const LightningBase&) = delete;
  LightningBase& operator=(const LightningBase&) = delete;

  // The trainer's view of this module (trainer_model.hpp), made when fit / validate / test /
  // predict attach it.  Each kind of module implements it once; a user's module does not.
  virtual std::unique_ptr<TrainerModel> trainer_model() = 0;

  // Lightning's configure_callbacks: callbacks this module brings, called when fit, validate and
  // test start; each replaces the TrainerOptions::callbacks of its type.
  virtual std::vector<std::shared_ptr<Callback>> configure_callbacks() { return {}; }

  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  virtual void on_predict_epoch_start() {}
  virtual void on_predict_epoch_end() {}

  // Lightning's self.log.  Outside a trainer it throws.  A deferred value (scalar.hpp) is read
  // only when a logger row, the progress bar, a callback, sync_dist on a step or the epoch's end
  // needs it, so logging a loss each step does not make the step wait for the device.
  void log(const std::string& name, const Scalar& value, const LogOptions& options = {});
  // A metric (metric.hpp) combined across every rank, logged as log(name, value, options) does
  // (sync_dist needs not be set: the value is already every rank's), then reset, as Lightning does
  // with a TorchMetrics object at the end of an epoch.  From on_train_epoch_end /
  // on_validation_epoch_end / on_test_epoch_end it is computed at once (collective: every rank
  // calls it).  From training_step / validation_step / test_step (TorchMetrics' usual
  // `self.log("val_acc", self.acc)` after `self.acc.update(...)`) it is computed when the epoch
  // ends, on every rank together (a rank that logged it from no step takes part with nothing), and
  // logged as the epoch's value; on_step is not supported for a metric (log a double for that).
  // Not from a dp/ddp2 replica's step.
  void log(const std::string& name, Metric& metric, const LogOptions& options = {});
  // The tensor from every rank (same shape everywhere), in rank order; {t} when alone.
  std::vector<Tensor> all_gather(const Tensor& t);
  std::vector<double> all_gather(double value);

  // Lightning's save_hyperparameters: the module's hyperparameters (e.g. its constructor's
  // arguments), merged into those saved so far (a name given again takes the new value).  Rank 0
  // writes them to lightning_logs/version_<n>/hparams.yaml when the trainer opens its log folder,
  // with the trainer's knobs under the key "trainer" (which is therefore not a valid name here).
  // An empty name or "trainer" is an error naming it.
  void save_hyperparameters(const HParams& hparams);
  const HParams& hparams() const { return hparams_; }

  bool is_global_zero() const;
  int global_rank() const;
  int world_size() const;
  int64_t current_epoch() const;
  int64_t global_step() const;
  Trainer* trainer() const { return trainer_; }

 private:
  friend class Trainer;
  friend class plrt::sdk::ModuleModel;  // links a dp/ddp2 replica to the trainer
  Trainer* trainer_ = nullptr;
  plrt::sdk::ModuleLink* link_ = nullptr;  // what this module reaches of trainer_ (module_link.hpp)
  HParams hparams_;
};

}  // namespace pl
