// pl::Trainer: Lightning's Trainer for C++ modules.  The knobs (accelerator, devices, strategy,
// num_nodes, precision, process_group_backend) pick plugins by name; plrun overrides them through
// PL_TRAINER_* variables; the launcher (plrun, torchrun, SLURM, Open MPI) is detected.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <plrt/sdk/amp.hpp>
#include <plrt/sdk/callback.hpp>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/data.hpp>
#include <plrt/sdk/devices.hpp>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/trainer_model.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl {

class ModelCheckpoint;

// Lightning's limit_{train,val,test}_batches: a count of batches (an integer: `= 10`) or a
// fraction of the loader's (a floating-point number in [0, 1]: `= 0.25`, `= 1.0` is every batch),
// per rank and per epoch.  0 (either way) skips the loop.  A fraction that leaves no batch of a
// non-empty loader is an error naming the knob, as Lightning's.  As text (PL_TRAINER_LIMIT_*,
// plrt-mlp's flags): "10" is a count, "0.25" or "1.0" a fraction (a '.' or an exponent).
class BatchLimit {
 public:
  BatchLimit(int count) : BatchLimit(static_cast<int64_t>(count)) {}
  BatchLimit(int64_t count) : value_(static_cast<double>(count)), count_(count), fraction_(false) {}
  BatchLimit(double fraction) : value_(fraction), count_(0), fraction_(true) {}
  // `what` names the knob in the error ("limit_train_batches", "--limit-val-batches", ...).
  static BatchLimit parse(const std::string& what, const std::string& text);
  bool is_fraction() const { return fraction_; }
  int64_t count() const { return count_; }
  double fraction() const { return value_; }
  bool all() const { return fraction_ && value_ == 1.0; }
  std::string text() const;  // "10" or "0.25" (parse's form)
  // The batches of a loader of `n` a loop takes; throws (naming `what`) when the limit is not
  // valid or a fraction leaves none of n > 0.
  int64_t of(int64_t n, const std::string& what) const;
  void check(const std::string& what) const;  // count >= 0; fraction finite in [0, 1]

 private:
  double value_;
  int64_t count_;
  bool fraction_;
};

struct TrainerOptions {
  std::string accelerator = "auto";
  Devices devices = Devices::automatic();
  std::string strategy = "auto";
  int num_nodes = 1;
  std::string precision = "32-true";   // 32-true, 16-mixed, bf16-mixed (or 32, 16, bf16)
  amp::GradScalerOptions grad_scaler;  // 16-mixed's dynamic loss scale (torch's defaults)
  std::string process_group_backend;   // empty: nccl on cuda, gloo otherwise
  std::optional<int64_t> max_epochs;   // unset: 1000 if max_steps is -1, else no limit (Lightning); -1: no limit
  int64_t max_steps = -1;              // optimizer steps; -1: no limit
  // Lightning's min_epochs / min_steps: should_stop (EarlyStopping's, a callback's) is held back
  // until this many epochs have finished and optimizer steps been taken (an info line says so);
  // max_epochs / max_steps still end fit.  Unset / -1: no minimum.
  std::optional<int64_t> min_epochs;
  int64_t min_steps = -1;
  BatchLimit limit_train_batches = 1.0;
  BatchLimit limit_val_batches = 1.0;
  BatchLimit limit_test_batches = 1.0;
  BatchLimit limit_predict_batches = 1.0;
  // Lightning's fast_dev_run: N > 0 runs N batches of training (N optimizer steps, one epoch) and
  // of validation / test, and writes nothing: no lightning_logs/ folder, no logger, no checkpoint
  // (ModelCheckpoint and EarlyStopping skip), as a quick check that the whole loop runs.  It
  // overrides limit_*_batches, max_steps, max_epochs, check_val_every_n_epoch and val_check_interval.
  int64_t fast_dev_run = 0;
  // Lightning's sanity check: fit first runs this many validation batches (-1: all; 0: none), so
  // a broken validation_step fails in seconds rather than after an epoch; what they log is
  // discarded.  Skipped when the first epoch fit runs would not validate (check_val_every_n_epoch),
  // without a validation loader, and under fast_dev_run.
  int64_t num_sanity_val_steps = 2;
  int accumulate_grad_batches = 1;
  // Lightning's gradient clipping, at every optimizer step (after 16-mixed's unscale; not on a step
  // the loss scaler skips), under every strategy.  gradient_clip_val 0: none (Lightning's None);
  // else finite and > 0.  gradient_clip_algorithm "norm" (torch.nn.utils.clip_grad_norm_, 2-norm):
  // total = sqrt(sum of squares of every gradient the optimizer steps), and when
  // gradient_clip_val / (total + 1e-6) < 1 every gradient is multiplied by that factor (a non-finite
  // total makes them NaN, as torch's error_if_nonfinite=False); a sharded strategy (ABI 1.5
  // owned_ranges) adds the ranks' sums with one reduce, so every rank clips by the global norm.
  // "value" (clip_grad_value_): every gradient element clamped to [-val, val].  Only the gradients
  // of the optimizer's parameters that were written this step are read and changed (a sharded
  // strategy: only the ranges this rank owns).  Lightning refuses clipping under manual
  // optimization and leaves it to FSDP / DeepSpeed themselves; plrt has no manual optimization and
  // clips the same way under every strategy.  PL_TRAINER_GRADIENT_CLIP_VAL /
  // PL_TRAINER_GRADIENT_CLIP_ALGORITHM override them.
  double gradient_clip_val = 0;
  std::string gradient_clip_algorithm = "norm";  // norm | value
  // Lightning's check_val_every_n_epoch and val_check_interval: when fit validates.  Validation
  // runs in the epochs whose number + 1 is a multiple of check_val_every_n_epoch (unset: Lightning's
  // None, every epoch, batches counted across epochs), after the training batch i (the epoch's,
  // from 0; with check_val_every_n_epoch unset the fit's) for which (i + 1) is a multiple of
  // val_check_batch: val_check_interval itself when it is a count (e.g. 100: every 100 training
  // batches), int(batches per epoch x f) (at least 1) when it is a fraction f in [0, 1] (1.0, the
  // default: at each epoch's last batch; 0.25: four times an epoch).  So 0.3 of 10 batches validates
  // after batches 3, 6 and 9, not at the epoch's end (Lightning's rule).  A count above the epoch's
  // batches is an error unless check_val_every_n_epoch is unset; a fraction needs it set.  When
  // val_check_interval is not 1.0, ModelCheckpoint and EarlyStopping act when each validation ends
  // (unless save_on_train_epoch_end / check_on_train_epoch_end say otherwise), a validation's values
  // reach the loggers as a row at that step, and fit stops after the validation that set
  // should_stop.  PL_TRAINER_CHECK_VAL_EVERY_N_EPOCH (N or None) and PL_TRAINER_VAL_CHECK_INTERVAL
  // (BatchLimit's text) override them.
  std::optional<int> check_val_every_n_epoch = 1;
  BatchLimit val_check_interval = 1.0;
  std::optional<uint64_t> seed;  // seed_everything(seed) at construction
  // e.g. bucket_cap_mb, after the alias's presets; checked by the strategy when the Trainer is made.
  // PL_TRAINER_STRATEGY_OPTIONS (plrun --strategy-option) sets keys on top, its value winning.
  std::vector<std::pair<std::string, std::string>> strategy_options;
  std::vector<std::pair<std::string, std::string>> accelerator_options;  // e.g. num_threads
  std::string default_root_dir = ".";  // logs and checkpoints: <dir>/lightning_logs/version_<n>/
  bool enable_checkpointing = true;    // checkpoints/last after every epoch and at the end of fit
  // checkpoints/last also inside epochs, always at an optimizer-step boundary (so a resume never
  // splits an accumulation window): every checkpoint_every_n_steps optimizer steps (global_step a
  // multiple of it; 0: off), and once checkpoint_every_seconds of wall-clock time have passed since
  // fit started or since fit last wrote a checkpoint (0: off).  Rank 0's clock decides the timed one
  // and the ranks learn it in one small collective after every optimizer step (the SIGTERM
  // agreement's, when that is on too).  Not at an epoch's last batch (the epoch's checkpoint follows
  // at once) nor at max_steps (fit's last one does).  Both need enable_checkpointing.
  // PL_TRAINER_CHECKPOINT_EVERY_N_STEPS / PL_TRAINER_CHECKPOINT_EVERY_SECONDS override them.
  int64_t checkpoint_every_n_steps = 0;
  double checkpoint_every_seconds = 0;
  // Lightning's enable_progress_bar.  On a terminal rank 0 draws one live line per stage (train,
  // validate, test: epoch, batch/total, it/s, ETA and the values logged with prog_bar), redrawn at
  // most 10 times a second, and log lines never interleave with it; the finished line of each
  // training epoch stays.  Not on a terminal (CI, files, pipes): one info line per epoch.  Under
  // plrun the bar shows when plrun's stderr is a terminal.  false: neither (nor the effective batch
  // size line).  PL_TRAINER_ENABLE_PROGRESS_BAR (0 or 1) overrides it.
  bool enable_progress_bar = true;
  // Lightning's enable_model_summary: a pl::ModelSummary (max_depth 1) logs the module's table at
  // fit's start on rank 0 unless the callbacks hold one already.  false with a ModelSummary among
  // the callbacks is an error.  PL_TRAINER_ENABLE_MODEL_SUMMARY (0 or 1) overrides it.
  bool enable_model_summary = true;
  int64_t log_every_n_steps = 50;  // step values reach the loggers every n steps
  // Lightning's profiler, over fit: "simple" prints (rank 0) and writes (every rank) a table of
  // where the time went, per action: data loading, training_step (forward and backward), each
  // call into the strategy (its gradient synchronisation, optimizer step, collectives), the
  // optimizer step, validation, checkpoints, each callback's hooks: calls, mean, total and share
  // of the fit, in <log dir>/profiler/fit-rank<r>.txt.  "trace" also writes every span of every
  // rank as a Chrome trace (profiler/rank<r>.trace.json, for Perfetto or chrome://tracing).  ""
  // or "none": off.  PL_TRAINER_PROFILER overrides it.
  std::string profiler;
  // Lightning's logger: a comma-separated list of "csv" (lightning_logs/version_<n>/metrics.csv)
  // and "tensorboard" (TensorBoard's events.out.tfevents.* beside it: every value metrics.csv gets,
  // with the same step, plus "epoch"); rank 0 writes them, flushed at each epoch's end and when fit
  // ends.  Either way rank 0 writes hparams.yaml there (LightningModule::save_hyperparameters and
  // the trainer's knobs).  An unknown, empty or repeated name is an error naming the valid ones.
  // PL_TRAINER_LOGGER overrides it.
  std::string logger = "csv";
  std::chrono::milliseconds timeout{0};  // collectives and the store; 0: 30 minutes
  bool read_env = true;                  // apply PL_TRAINER_* overrides (plrun sets them)
  // Lightning's use_distributed_sampler: shard every loader across ranks with a DistributedSampler.
  // false: each rank iterates its loader as given (e.g. data already split per rank).
  bool use_distributed_sampler = true;
  // Preemption, as Lightning does under SLURM: a SIGTERM during fit (SLURM's before the time limit,
  // `sbatch --signal=TERM@60`, scancel) lets every rank finish its step; the ranks agree (one small
  // collective after an optimizer step, about every 100 ms of training while this is on: the signal
  // is honoured within that and a step), checkpoints/last is written (also
  // with enable_checkpointing false) and fit returns with interrupted() true.  Unset: on when SLURM
  // or plrun launched the job: plrun passes its SIGTERM on to the workers and SIGKILLs them after
  // --grace-period (3 s, at most 5), so the step, the agreement and the save must fit in it; when
  // only the workers got the signal (an eviction), their exit (128 + SIGTERM) is a failed round
  // that plrun --max-restarts restarts, and the restarted workers resume from checkpoints/last.
  // Off otherwise (torchrun, mpirun, horovodrun, a single process).
  // PL_TRAINER_CHECKPOINT_ON_SIGTERM (0 or 1) overrides it.
  std::optional<bool> checkpoint_on_sigterm;
  // Lightning's callbacks (callback.hpp: ModelCheckpoint, EarlyStopping, LearningRateMonitor or
  // one's own), with those of LightningModule::configure_callbacks (which replace the ones here of
  // the same type).  Shared: the trainer calls them during fit/validate/test, and their state goes
  // into checkpoints.  A ModelCheckpoint with enable_checkpointing false is an error.
  std::vector<std::shared_ptr<Callback>> callbacks;
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions options = {}, RuntimeOptions runtime = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains `module` on `train`, validating on `val` as check_val_every_n_epoch and val_check_interval say.
  // ckpt_path: a checkpoint folder to resume from ("" = from scratch; a folder without trainer.json
  // is an error naming it), or "last": the newest complete checkpoint under
  // <default_root_dir>/lightning_logs/version_*/checkpoints/ (the highest global_step in its
  // trainer.json, ties to the higher version), and fit keeps logging into that version_<n> folder;
  // none: fit starts from scratch and says so.  Rank 0 picks it and tells the others.  A restarted
  // worker (PL_RESTART_COUNT > 0, read with read_env) takes "" as "last".  The checkpoint may come
  // from another world size: the epoch resumes at the global sample position it was saved at
  // (trainer.json samples_done), the rest of the epoch split over this run's ranks, and the
  // learning rate stays the checkpoint's (rank 0 says how the effective batch changed).  With
  // ddp_spawn the workers are forked here, and when fit returns this process's module holds the
  // trained weights and callback_metrics() the logged values.
  void fit(LightningBase& module, DataLoader& train, DataLoader* val = nullptr, const std::string& ckpt_path = "");
  std::map<std::string, double> validate(LightningBase& module, DataLoader& loader);
  std::map<std::string, double> test(LightningBase& module, DataLoader& loader);
  // Lightning's predict: module.predict_step on each batch of `loader` (limit_predict_batches of
  // them) in eval mode, under the precision's autocast; returns this rank's predictions in batch
  // order (under ddp, those of its DistributedSampler shard: all_gather them for every rank's).
  // Callbacks get setup/teardown("predict") and the on_predict_* hooks.  dp and ddp2 predict on
  // their first device.  ddp_spawn: after fit only, in this process.
  std::vector<Tensor> predict(LightningBase& module, DataLoader& loader);
  // Collective: every rank calls it; rank 0 writes (model.safetensors, optimizer.safetensors,
  // trainer.json, atomically).
  void save_checkpoint(const std::string& path);

  // The trainer's view of the module that fit / validate / test / predict attached
  // (trainer_model.hpp), e.g. for a callback that reads its parameters; nullptr before.
  TrainerModel* model() const;
  int global_rank() const;
  int world_size() const;
  int local_rank() const;
  int node_rank() const;
  bool is_global_zero() const { return global_rank() == 0; }
  int64_t current_epoch() const;
  int64_t global_step() const;
  // fit stopped early for a SIGTERM (checkpoint_on_sigterm) after writing checkpoints/last.
  bool interrupted() const;
  // Samples trained by every optimizer step so far, summed over the ranks and across resumes (kept
  // in trainer.json): real samples only, not the DistributedSampler's padding duplicates (also
  // those of steps 16-mixed skipped).  With use_distributed_sampler false at world size W, this
  // rank's batches times W (the trainer does not see the other ranks' data).
  int64_t samples_trained() const;
  // PL_RESTART_COUNT (0 when unset or read_env is false): how many times the launcher restarted
  // the job's workers.
  int64_t restart_count() const;
  // The checkpoint the last fit resumed from ("" when it started from scratch).
  std::string resumed_from() const;
  const TrainerOptions& options() const;  // after PL_TRAINER_* overrides
  const JobConfig& job() const;
  const ClusterEnv& cluster() const;
  const Runtime& runtime() const;
  std::string log_dir() const;  // "" on ranks other than 0
  // Last values: epoch aggregates and the latest step values (Lightning's callback_metrics).
  const std::map<std::string, double>& callback_metrics() const;
  // A strategy statistic (ddp: "exposed_allreduce_ms", ...); throws when unknown.
  double strategy_stat(const std::string& name) const;
  // The bytes of optimizer state this process holds (momentum, Adam's moments): every parameter's
  // under ddp, this rank's shard under ddp_sharded.  0 before fit.
  int64_t optimizer_state_bytes() const;
  // Samples per batch across the job (per-device batch x devices x nodes for ddp-like strategies;
  // the batch x nodes for dp/ddp2, which split each batch over their devices), known once fit
  // starts (0 before); rank 0 also prints it.  Multiply by accumulate_grad_batches for the
  // samples per optimizer step.
  int64_t effective_batch_size() const;
  // 16-mixed's current loss scale (1 for other precisions) and the optimizer steps it skipped
  // because a gradient was inf or NaN.
  double loss_scale() const;
  int64_t skipped_steps() const;
  // One module per extra device under dp/ddp2 (replica r >= 1; 0 is the module given to fit).
  int num_replicas() const;

  // ---- for callbacks ----
  // The callbacks of the running (or last) fit/validate/test, in the order they are called.
  const std::vector<std::shared_ptr<Callback>>& callbacks() const;
  ModelCheckpoint* checkpoint_callback() const;  // the first ModelCheckpoint, or nullptr
  // Lightning's trainer.should_stop: set it on any rank and every rank stops together.  Set inside
  // an epoch (e.g. on_train_batch_end), fit stops at an optimizer step, as max_steps stops it
  // (checkpoints/last then resumes there): at once in a single process; across ranks at the next
  // agreement, which runs about every 100 ms of training while the fit has callbacks (one small
  // reduce, shared with SIGTERM's).  Set at an epoch's end (EarlyStopping), fit stops after it.
  bool should_stop() const;
  bool sanity_checking() const;  // inside fit's sanity check
  void set_should_stop(bool stop);
  Optimizer* optimizer() const;  // configure_optimizers' during and after fit, else nullptr
  const std::vector<LRSchedulerConfig>& lr_scheduler_configs() const;
  // Rank 0 writes `values` to the loggers now, as a row at the current global step (not into
  // callback_metrics); other ranks do nothing.  E.g. LearningRateMonitor's rates.
  void log_metrics(const std::map<std::string, double>& values);
  // Collectives for callbacks (every rank calls them): rank 0's bytes on every rank; and whether
  // every rank (all) or any rank (!all) decided true.  Alone: the argument.
  std::string broadcast(const std::string& bytes);
  bool reduce_boolean_decision(bool decision, bool all = true);

  // ---- for callbacks that act on validation results (ModelCheckpoint, EarlyStopping, yours) ----
  bool fit_has_validation() const;       // fit was given a validation loader that yields batches
  bool validates_inside_epochs() const;  // val_check_interval validates inside epochs (it is not 1.0)
  bool validation_has_run() const;       // a validation of this fit has run (its sanity check aside)
  // When such a callback acts, Lightning's one rule.  `on_train_epoch_end` is the callback's own
  // choice (ModelCheckpoint's save_on_train_epoch_end, EarlyStopping's check_on_train_epoch_end),
  // `by_default` what it takes when that is unset.  Called from on_train_epoch_end: it acts there
  // when it chose the epoch's end, or when fit validates once per epoch and this epoch's
  // validation ran.  Called from on_validation_end: it acts there when fit's own validation inside
  // an epoch (val_check_interval) ended and it did not choose the epoch's end.
  bool acts_at_train_epoch_end(std::optional<bool> on_train_epoch_end, bool by_default) const;
  bool acts_at_validation_end(std::optional<bool> on_train_epoch_end) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pl
