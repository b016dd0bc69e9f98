// pl::Callback: Lightning's callback interface.  Code that watches or steers training from outside
// the module (checkpointing, early stopping, monitors), given to TrainerOptions::callbacks or
// returned by LightningModule::configure_callbacks.  Every hook runs on every rank, in the order
// the callbacks are listed (ModelCheckpoint ones last, as Lightning orders them), and receives the
// trainer and the module.  A hook that calls a collective (Trainer::save_checkpoint, broadcast,
// reduce_boolean_decision, LightningModule::all_gather) must be called the same way on every rank.
//
// The order of one fit (Lightning's):
//   setup("fit") · on_fit_start · on_train_start ·
//   per epoch: on_train_epoch_start · per batch: on_train_batch_start · (step) · on_train_batch_end ·
//              validation: on_validation_start · on_validation_epoch_start · per batch:
//              on_validation_batch_start/_end · on_validation_epoch_end · on_validation_end ·
//              on_train_epoch_end (callbacks whose monitors() is false) · the module's
//              on_train_epoch_end · on_train_epoch_end (monitors() true: they see every value of
//              the epoch, the validation's included, and the epoch's learning-rate step) ·
//   on_train_end · on_fit_end · teardown("fit")
// validate(), test() and predict() call setup/teardown("validate" / "test" / "predict") and their
// stage's hooks.
#pragma once

#include <cstdint>
#include <exception>
#include <plrt/sdk/data.hpp>
#include <plrt/sdk/hparams.hpp>
#include <plrt/sdk/scalar.hpp>
#include <string>

namespace pl {

class Trainer;
class LightningBase;
class Optimizer;

class Callback {
 public:
  virtual ~Callback() = default;

  // ---- state kept in checkpoints (trainer.json "callbacks", keyed by state_key) ----
  // The key this callback's state is saved under: the class name by default; a callback that can
  // appear twice with different settings makes it unique (ModelCheckpoint's includes its monitor).
  // Two callbacks with state and the same key are an error naming it when fit starts.
  virtual std::string state_key() const;
  // Empty: nothing is saved.  On resume, load_state_dict gets what state_dict returned (on every
  // rank: rank 0's file is read by all).
  virtual HParams state_dict() const { return {}; }
  virtual void load_state_dict(const HParams& state) { (void)state; }
  // true: its on_train_epoch_end runs after the module's on_train_epoch_end and the epoch's
  // learning-rate step, with every value of the epoch in Trainer::callback_metrics (Lightning's
  // monitoring callbacks: ModelCheckpoint, EarlyStopping).
  virtual bool monitors() const { return false; }

  virtual void setup(Trainer& trainer, LightningBase& module, const std::string& stage) {
    (void)trainer, (void)module, (void)stage;
  }
  virtual void teardown(Trainer& trainer, LightningBase& module, const std::string& stage) {
    (void)trainer, (void)module, (void)stage;
  }
  virtual void on_fit_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_fit_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  // Around fit's sanity check (TrainerOptions::num_sanity_val_steps), after on_fit_start and
  // before on_train_start; the validation hooks run between them as in any validation, with
  // Trainer::sanity_checking() true.
  virtual void on_sanity_check_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_sanity_check_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_train_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_train_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_train_epoch_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_train_epoch_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  // batch_idx: the batch's index in the epoch.  on_train_batch_end comes after the batch's
  // optimizer step when the batch ends an accumulation window (global_step already counts it).
  virtual void on_train_batch_start(Trainer& trainer, LightningBase& module, const Batch& batch, int64_t batch_idx) {
    (void)trainer, (void)module, (void)batch, (void)batch_idx;
  }
  // `loss`: what training_step returned; loss.value() reads it (a deferred loss: waits for the
  // device, so a callback that reads it every batch makes every step wait).
  virtual void on_train_batch_end(Trainer& trainer, LightningBase& module, const Scalar& loss, const Batch& batch,
                                  int64_t batch_idx) {
    (void)trainer, (void)module, (void)loss, (void)batch, (void)batch_idx;
  }
  // Before each optimizer step: after gradient sync and 16-mixed's unscaling, before gradient
  // clipping (Lightning's order), also on a step the loss scaler skips.
  virtual void on_before_optimizer_step(Trainer& trainer, LightningBase& module, Optimizer& optimizer) {
    (void)trainer, (void)module, (void)optimizer;
  }
  virtual void on_validation_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_validation_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_validation_epoch_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_validation_epoch_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_validation_batch_start(Trainer& trainer, LightningBase& module, const Batch& batch,
                                         int64_t batch_idx) {
    (void)trainer, (void)module, (void)batch, (void)batch_idx;
  }
  virtual void on_validation_batch_end(Trainer& trainer, LightningBase& module, const Batch& batch, int64_t batch_idx) {
    (void)trainer, (void)module, (void)batch, (void)batch_idx;
  }
  virtual void on_test_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_test_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_test_epoch_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_test_epoch_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_test_batch_start(Trainer& trainer, LightningBase& module, const Batch& batch, int64_t batch_idx) {
    (void)trainer, (void)module, (void)batch, (void)batch_idx;
  }
  virtual void on_test_batch_end(Trainer& trainer, LightningBase& module, const Batch& batch, int64_t batch_idx) {
    (void)trainer, (void)module, (void)batch, (void)batch_idx;
  }
  virtual void on_predict_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_predict_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_predict_epoch_start(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_predict_epoch_end(Trainer& trainer, LightningBase& module) { (void)trainer, (void)module; }
  virtual void on_predict_batch_start(Trainer& trainer, LightningBase& module, const Batch& batch, int64_t batch_idx) {
    (void)trainer, (void)module, (void)batch, (void)batch_idx;
  }
  // `outputs`: what predict_step returned for this batch.
  virtual void on_predict_batch_end(Trainer& trainer, LightningBase& module, const Tensor& outputs, const Batch& batch,
                                    int64_t batch_idx) {
    (void)trainer, (void)module, (void)outputs, (void)batch, (void)batch_idx;
  }
  // fit/validate/test/predict is leaving with an exception (after which it is rethrown).
  virtual void on_exception(Trainer& trainer, LightningBase& module, const std::exception& error) {
    (void)trainer, (void)module, (void)error;
  }
};

}  // namespace pl
