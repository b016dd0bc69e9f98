// The trainer's private state, shared by trainer.cpp (set-up and loops), trainer_step.cpp,
// trainer_eval.cpp, trainer_checkpoint.cpp and trainer_spawn.cpp (ddp_spawn's forked workers).
#pragma once

#include <chrono>
#include <csignal>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <plrt/sdk/amp.hpp>
#include <plrt/sdk/store.hpp>
#include <plrt/sdk/trainer.hpp>
#include <plrt/sdk/trainer_model.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "hparams_json.hpp"
#include "job_session.hpp"
#include "loggers.hpp"
#include "metrics.hpp"
#include "module_link.hpp"
#include "profiler.hpp"
#include "progress_bar.hpp"
#include "strategy_handle.hpp"

namespace plrt::sdk {
// The C view of a model's parameters then buffers (PyTorch's order); `names` gets their dotted
// names (point each view's name at them once `names` stops changing).
std::vector<PL_Parameter> parameter_views(pl::TrainerModel& m, std::vector<std::string>& names);
}  // namespace plrt::sdk

namespace pl {

// trainer_preempt.cpp: while alive (during fit, when `on`), SIGTERM only sets a flag that
// Trainer::Impl::agree_after_step reads; the previous disposition comes back at destruction.
class SigtermWatch {
 public:
  explicit SigtermWatch(bool on);
  ~SigtermWatch();
  SigtermWatch(const SigtermWatch&) = delete;
  SigtermWatch& operator=(const SigtermWatch&) = delete;
  bool on() const { return installed_; }

 private:
  bool installed_ = false;
  struct sigaction previous_ {};
};

// The replica whose step the calling thread runs during a multi-replica step (-1 elsewhere):
// LightningModule::log buffers the values of replicas and the trainer merges them.
inline thread_local int t_current_replica = -1;

struct ReplicaScope {  // marks the calling thread as running replica r (LightningModule::log)
  explicit ReplicaScope(int r) { t_current_replica = r; }
  ~ReplicaScope() { t_current_replica = -1; }
  ReplicaScope(const ReplicaScope&) = delete;
  ReplicaScope& operator=(const ReplicaScope&) = delete;
};

// How dp/ddp2 split a batch of `rows` over n replicas, as torch.nn.parallel.scatter does: chunks of
// ceil(rows / n) rows, so the last replicas may get fewer rows, or none (replicas `used` .. n-1).
// Training (trainer_step.cpp) and evaluation (trainer_eval.cpp) share it.  With n == 1 the one
// replica gets the whole batch, as it is.
struct ReplicaSplit {
  int n = 1, used = 1;
  int64_t rows = 1, chunk = 1;
  std::vector<int64_t> sizes;  // rows of replica r (0 for r >= used)
  static ReplicaSplit of(const Batch& batch, int n);
  // Replica r's rows of every tensor whose first dimension is the batch's (other tensors whole).
  Batch slice(const Batch& batch, int r) const;
};

// Member order is destruction order, reversed.  The strategy borrows, until its teardown, the
// accelerator, the store, c_params and param_names, the module's tensors and the replicas'
// memory (pl_strategy.h): all of them are declared BEFORE `strategy`, so that destroying an Impl
// tears the strategy down (and destroys it) while they are all still alive.  The module's tensors
// are the user's: `borrowed` holds references to them, so they outlive the teardown even when the
// module is destroyed before the trainer.  Keep new members the strategy borrows above `strategy`.
struct Trainer::Impl final : plrt::sdk::ModuleLink {
  Trainer* self = nullptr;  // the owning Trainer (modules point back to it)
  TrainerOptions o;
  // The environment, runtime, job, this process's place in it, the accelerator, its device and the
  // store: set up as every driver sets them up (job_session.hpp).  The names below are the
  // session's fields, which every trainer file reads.
  plrt::sdk::JobSession session;
  ClusterEnv& env = session.env;
  std::shared_ptr<Runtime>& rt = session.rt;
  JobConfig& job = session.job;
  int &rank = session.rank, &world = session.world, &local_rank = session.local_rank;
  int &local_world = session.local_world, &node_rank = session.node_rank;
  Accelerator& acc = session.acc;
  PL_Device& device = session.device;
  std::unique_ptr<Store>& store = session.store;
  bool spawned_worker = false;  // a ddp_spawn worker forked by fit
  int spawn_store_port = -1;    // the parent's store port, for a spawned worker
  bool prepared = false;
  // ---- borrowed by the strategy until teardown ----
  std::vector<std::string> param_names;
  std::vector<PL_Parameter> c_params;
  std::vector<Parameter*> param_ptrs;  // c_params[i]'s Parameter (nullptr for a buffer)
  std::vector<Tensor> borrowed;        // the module's tensors c_params points into
  // The loop's view of the module (trainer_model.hpp; set by attach, dropped with the module) and,
  // under dp/ddp2, one model per extra device (replica r is replicas[r - 1]), on replica_devices[r].
  std::unique_ptr<TrainerModel> model;
  std::vector<std::unique_ptr<TrainerModel>> replicas;
  // ---- the strategy: destroyed before everything above ----
  plrt::sdk::StrategyHandle strategy;
  std::unordered_map<const Parameter*, size_t> param_index;

  std::vector<PL_Device> replica_devices;
  int num_replicas = 1;
  // Evaluation ran the strategy's run_step, which takes the copy of the root's values it owed the
  // replicas; the root may change before the next training step (weights the program loads, a
  // checkpoint of a later fit), so that step copies them itself (trainer_eval.cpp).
  bool replicas_need_copy = false;
  // log() calls made inside replicas during a multi-replica step, merged after it (one per replica).
  struct PendingLog {
    std::string name;
    Scalar value;
    LogOptions options;
    int64_t batch_size;
  };
  std::vector<std::vector<PendingLog>> replica_logs;
  amp::Precision precision;
  std::unique_ptr<amp::GradScaler> scaler;  // 16-mixed only
  int64_t effective_batch = 0;              // samples per optimizer step, across the job

  LightningBase* module = nullptr;   // the module fit/validate/test drives (set by attach)
  LightningBase* adopted = nullptr;  // the module whose trainer_ is this trainer
  std::unique_ptr<Optimizer> optimizer;
  std::vector<LRSchedulerConfig> schedulers;  // configure_lr_schedulers' (trainer_schedulers.cpp)
  nlohmann::json saved_schedulers;            // a checkpoint's, put into them once they are made
  // The ranges (optimizer indices) whose averaged gradients this rank holds at the accumulation
  // boundary and whose optimizer state it keeps: the strategy's owned_ranges when it shards (ABI
  // 1.5; `sharded` true: they partition the elements across ranks), else every parameter of the
  // optimizer that requires grad, whole.  Set by use_optimizer.
  bool sharded = false;
  std::vector<ParamRange> grad_ranges;
  // ABI 1.6: the strategy averages the optimizer's first moment (bagua's qadam), so the gradients
  // carry QAdam's m_i (trainer_step.cpp bind_optimizer / form_first_moment).  opt_index[k]: the
  // optimizer's index of setup's entry k (or SIZE_MAX); formed[k]: m_i written in this step.
  QAdam* first_moment = nullptr;
  std::vector<size_t> opt_index;
  std::vector<char> formed;
  bool boundary_now = true;           // the batch in progress ends an accumulation
  Tensor clip_sum;                    // f64 [1] on the gradients' device: clipping's sum of squares
  std::vector<PL_Tensor> clip_views;  // the ranges' gradient views at one step (kept for its capacity)
  plrt::sdk::MetricLog metrics;
  plrt::sdk::Loggers loggers;  // metrics.csv and TensorBoard (TrainerOptions::logger), rank 0's
  // callback_metrics.  Step values are not read when logged: they wait in `unread` (and the
  // steps' losses in `unchecked_losses`, for the non-finite warning) until settled() reads them,
  // which every reader of `callback` calls first: a logger row, the progress bar's frame, a
  // monitoring callback, the epoch's end.  So a step on a cuda device need not wait for it.
  std::map<std::string, double> callback;
  std::map<std::string, Scalar> unread;
  struct LossCheck {
    int64_t epoch, batch;
    Scalar loss;
  };
  std::vector<LossCheck> unchecked_losses;  // read once 64 wait, or by settled()
  std::map<std::string, double>& settled();
  void check_losses();  // reads the unchecked losses; warns about a non-finite one
  int64_t epoch = 0, step = 0;
  // Where the trainer is inside `epoch` (saved in trainer.json, set by a checkpoint's load):
  // epoch_samples, the positions of the epoch's order consumed (global across the ranks with a
  // DistributedSampler, this rank's own loader's otherwise; DataLoader::position_after), and
  // epoch_batches, this rank's batches done.  Both 0 at an epoch's start.  legacy_batches >= 0: a
  // checkpoint without samples_done (its batches_done, turned into a position once the loader is known).
  int64_t epoch_samples = 0, epoch_batches = 0, legacy_batches = -1;
  int legacy_world = 0;
  bool stopped_in_epoch = false;  // train_epoch returned early (max_steps, should_stop)
  int64_t samples_trained = 0;    // see Trainer::samples_trained
  int64_t restart_count = 0;      // PL_RESTART_COUNT
  // trainer_resume.cpp: the job's key (job_key_of(PL_JOB_TOKEN)), written as kJobMarker in the
  // version folder a job opens, so that a restart without a checkpoint logs there again.
  std::string job_key;
  static constexpr const char* kJobMarker = ".plrt-job";
  static std::string job_key_of(const char* token);
  std::string own_version_dir() const;
  // trainer_resume.cpp: the checkpoint fit resumed from, and what it said about its job (the
  // world-size change log line).
  std::string resumed_from;
  int resumed_world = 0;
  int64_t resumed_step_batch = 0;  // samples per optimizer step across the job when it was saved (0: unknown)
  std::chrono::steady_clock::time_point last_checkpoint;  // fit's last checkpoint (or its start)
  // Preemption (trainer_preempt.cpp): the watch during fit, and whether fit stopped for a SIGTERM.
  std::optional<SigtermWatch> sigterm_watch;
  bool interrupted = false;
  bool watch_sigterm() const;  // checkpoint_on_sigterm, by default on under SLURM
  // After an optimizer step, what every rank does next, agreed in one collective when needed: stop
  // (any rank got SIGTERM) and save (rank 0's clock says checkpoint_every_seconds have passed).
  // should_stop: a callback's Trainer::should_stop on any rank (the agreement runs while there are
  // callbacks; alone, the flag is read after every step).
  struct StepAgreement {
    bool stop = false, save = false, should_stop = false;
  };
  StepAgreement agree_after_step();
  void reset_agreement();                       // at fit's start
  static constexpr double kAgreeEveryMs = 100;  // how often the ranks agree (trainer_preempt.cpp)
  static constexpr int64_t kMaxAgreeSteps = 10000;
  int64_t agree_countdown = 0, steps_since_agreement = 0;
  std::chrono::steady_clock::time_point last_agreement;
  bool in_training_step = false;
  bool in_eval_step = false;                                     // validation_step / test_step runs (eval_loop)
  std::shared_ptr<Impl*> alive = std::make_shared<Impl*>(this);  // the grad-ready hook's liveness token
  int64_t batch_size = 1;
  // trainer_callbacks.cpp: this fit's (validate's, test's) callbacks in call order, should_stop
  // (agreed at each epoch's end), and a checkpoint's callback states until the callbacks load them.
  std::vector<std::shared_ptr<Callback>> cbs;
  bool should_stop = false;
  bool has_val = false, val_ran = false;  // fit has a validation loader; it ran in this epoch
  bool val_has_run = false;               // validation ran at least once in this fit
  // trainer_val_check.cpp: when fit validates (check_val_every_n_epoch, val_check_interval).
  // val_check_batch: validation after each batch i with (i + 1) % val_check_batch == 0 (0: fit
  // has no validation); val_inside_epochs: val_check_interval is not 1.0, so the monitoring
  // callbacks act at each validation's end; fit_validating: fit's own validation runs (not the
  // sanity check, not Trainer::validate).
  int64_t val_check_batch = 0, epoch_batches_limit = 0;
  bool val_inside_epochs = false, fit_validating = false;
  void plan_validation(const DataLoader& train, const DataLoader* val);  // at fit's start: the errors
  bool validates_in_epoch() const;                                       // this epoch validates at all
  bool validates_after(int64_t batch) const;                             // after the epoch's batch `batch`
  // fit's validation: eval_loop with the training loop's logged values set aside, the monitoring
  // callbacks' on_validation_end; inside an epoch also its logger row and the should_stop agreement.
  std::map<std::string, double> fit_validation(DataLoader& val, bool inside_epoch);
  // Set while monitoring callbacks run at an epoch's end: a checkpoint saved then resumes at the
  // next epoch's start (trainer.json: epoch + 1, nothing of it done).
  bool epoch_done = false;
  nlohmann::json saved_callbacks;
  // trainer_progress.cpp: rank 0's progress bar (made at the first stage; closed at destruction).
  plrt::sdk::ProgressBar::Setup bar_setup;
  std::unique_ptr<plrt::sdk::ProgressBar> bar;
  void progress_setup(RuntimeOptions& r, bool first_rank);
  std::map<std::string, double> progress_values();  // reads the step values (settled())
  void progress_start(const char* stage, int64_t total, int64_t done = 0);
  void progress_step(int64_t done);
  bool progress_end();    // the stage's last frame; false: no bar (print the per-epoch line)
  void progress_close();  // an open stage ends where it is (fit stopped inside an epoch)
  std::string log_dir;
  bool log_ready = false;  // open_log_dir ran

  void bind_optimizer();             // after use_optimizer and a checkpoint's load
  void broadcast_optimizer_state();  // ABI 1.7: every rank's optimizer state becomes rank 0's
  void form_first_moment(size_t k);  // setup's entry k reported its gradient
  void form_remaining();             // before after_backward: the entries not reported

  explicit Impl(TrainerOptions options, const RuntimeOptions& ro);
  ~Impl();
  // The module `m` is being destroyed: the trainer stops pointing at it.  Its tensors that the
  // strategy borrowed stay alive in `borrowed` until the strategy's teardown.
  void forget_module(const LightningBase* m) override {
    if (module == m) module = nullptr, model.reset();
    if (adopted == m) adopted = nullptr;
  }
  // m.trainer_ = this trainer (before anything else of fit/validate/test); the trainer m had
  // before forgets it.  Invariant: `adopted` is the one module whose trainer_ is this trainer, and
  // `module` is either it or nullptr, so that a module's destructor reaches every pointer to it.
  void adopt(LightningBase& m);
  // Unhooks the adopted module from this trainer (its trainer pointer, and the grad-ready hook when
  // this trainer set it): a module that outlives its trainer must not call into freed memory.
  void detach_module();
  // trainer_options.cpp
  void apply_env_overrides();
  void check_options() const;
  // trainer_limits.cpp: fast_dev_run's overrides (before the job) and its note (rank 0); whether
  // min_epochs / min_steps let should_stop end fit now (an info line the first time they do not).
  void apply_fast_dev_run();
  void note_fast_dev_run() const;
  bool can_stop_early();
  bool min_note_given = false;
  JobRequest request() const;  // the job the options ask for
  void resolve_job();
  void prepare(LightningBase& m);  // accelerator, store, strategy, module placement (once)
  void attach(LightningBase& m);
  void distribute(DataLoader& loader, const char* stage);
  Batch to_device(const Batch& b) const;
  plrt::sdk::Collectives collectives() override;  // metrics' collectives (metrics.hpp decides the route)
  // The module's log (module_link.hpp; trainer_module_link.cpp).
  void log_value(const std::string& name, const Scalar& value, const LogOptions& options) override;
  void log_metric(const std::string& name, Metric& metric, const LogOptions& options) override;
  void info(const std::string& msg) const { rt->log(PL_LOG_INFO, msg); }
  void warn(const std::string& msg) const { rt->log(PL_LOG_WARN, msg); }

  void fit_here(LightningBase& m, DataLoader& train, DataLoader* val, const std::string& ckpt);
  void fit_loop(LightningBase& m, DataLoader& train, DataLoader* val, const std::string& ckpt);
  std::map<std::string, double> evaluate(LightningBase& m, DataLoader& loader, bool test);
  std::vector<Tensor> predict(LightningBase& m, DataLoader& loader);  // trainer_predict.cpp
  std::vector<Tensor> predict_loop(DataLoader& loader);
  // One epoch's batches (validating inside it where val_check_interval says), then its end:
  // validation when due, the on_train_epoch_end hooks, the epoch's logged values, its learning-rate
  // step (a whole epoch only) and the monitoring callbacks.  An epoch that max_steps or should_stop
  // ended early (stopped_in_epoch) ends the same way, as Lightning's; stop_validates: a should_stop
  // that did not come from a validation, which Lightning follows with one.
  void train_epoch(DataLoader& train, DataLoader* val);
  void end_train_epoch(DataLoader* val, double steps_per_s);
  bool stop_validates = false;
  // trainer_step.cpp: one batch's forward and backward on every replica; the optimizer step.
  Scalar training_step(const Batch& batch, int64_t batch_idx);
  void optimizer_step();
  void step_ranges(const PL_ParamRange* ranges, size_t num_ranges);  // the strategy's optimizer_step
  // trainer_clip.cpp: TrainerOptions' gradient clipping over grad_ranges (nothing when it is off).
  void clip_gradients();
  // Takes configure_optimizers' result (after attach) and sets grad_ranges.
  void use_optimizer(std::unique_ptr<Optimizer> opt);
  void attach_replicas();
  TrainerModel& model_of(int r) { return r == 0 ? *model : *replicas[static_cast<size_t>(r - 1)]; }
  void merge_replica_logs(const std::vector<int64_t>& batch_sizes);
  void report_effective_batch(const DataLoader& train);
  // trainer_eval.cpp: validation / test over a loader (every replica under dp/ddp2, *_step_end).
  // `sanity`: fit's sanity check: at most num_sanity_val_steps batches, values discarded.
  std::map<std::string, double> eval_loop(DataLoader& loader, bool test, bool sanity = false);
  void sanity_check(DataLoader* val);  // trainer_limits.cpp
  bool sanity_checking = false;
  void eval_batch(const Batch& batch, int64_t batch_idx, bool test);
  void copy_root_to_replicas();
  void end_epoch_log(const std::map<std::string, double>& values, double steps_per_s);

  // trainer_checkpoint.cpp
  void save_checkpoint(const std::string& path);
  void load_checkpoint(const std::string& path);
  // trainer_schedulers.cpp: configure_lr_schedulers' entries checked and a checkpoint's state put
  // in; step_schedulers steps those of `interval` whose frequency divides `index` (the epoch's
  // batch + 1, or the epoch + 1), a plateau one with its monitor from `values`.
  void use_schedulers();
  void step_schedulers(const std::string& interval, int64_t index, const std::map<std::string, double>& values);
  nlohmann::json schedulers_state() const;
  // trainer_resume.cpp
  // fit's checkpoint: "" and "last" (or "" after a restart) resolved; rank 0 decides, the others are
  // told (a collective when "last").  check_resume_path: an explicit path's error, before any work.
  static void check_resume_path(const std::string& ckpt);
  std::string resolve_resume(const std::string& ckpt);
  // Rank 0 picks the log folder once: `continue_in` (a version folder whose metrics.csv keeps its
  // rows before step `keep_before`) or a new version_<n>.
  void open_log_dir(const std::string& continue_in, int64_t keep_before = 0);
  void write_hparams() const;  // rank 0: <log_dir>/hparams.yaml (trainer_resume.cpp)
  // Rank 0 at fit's start: leftovers of interrupted writes whose process is gone, in the folders
  // fit writes to and the one it resumes from.
  void clean_leftovers(const std::string& resumed);
  // The loader's start in the resumed epoch (a legacy checkpoint's batches_done converted), checked
  // against the dataset; and the world-size change's log line.
  void resume_position(DataLoader& train);
  void report_resume();
  // checkpoints/last during fit (also restarts checkpoint_every_seconds' clock).
  void save_last();
  bool checkpoint_due_by_steps() const;
  // trainer_callbacks.cpp
  // The callbacks of TrainerOptions and the module's configure_callbacks merged and ordered
  // (ModelCheckpoint last), at the start of fit, validate and test (as Lightning does); duplicate
  // state keys and ModelCheckpoint without enable_checkpointing are errors.
  void use_callbacks(LightningBase& m);
  // f(c) for each callback, timed as "[Callback]<type>.<hook>" when the profiler is on.
  template <class F>
  void each_callback(const char* hook, F&& f) {
    if (!profiler.on()) {
      for (auto& c : cbs) f(*c);
      return;
    }
    for (size_t i = 0; i < cbs.size(); ++i) {
      const plrt::sdk::Profiler::Span timed(&profiler, callback_action(i, hook));
      f(*cbs[i]);
    }
  }
  // The monitoring callbacks' on_train_epoch_end, then the stop agreement; `whole`: the epoch ran
  // to its end (a checkpoint saved now resumes at the next one), else it stopped inside.
  void monitoring_epoch_end(bool whole);
  void agree_should_stop();  // any rank's should_stop is every rank's (one collective when world > 1)
  nlohmann::json callbacks_state() const;
  void load_callbacks_state();  // saved_callbacks into cbs
  // trainer_profile.cpp: TrainerOptions::profiler over fit (profiler.hpp): begun once the log
  // folder is known, ended (the table, the files; one collective for the folder) when fit ends.
  plrt::sdk::Profiler profiler;
  std::chrono::steady_clock::time_point profile_t0;
  std::vector<std::string> callback_types;  // "[Callback]<type>." of each of cbs, made when first needed
  std::string module_type;                  // "[LightningModule]<type>."
  void profile_begin();
  void profile_end();
  std::string callback_action(size_t i, const char* hook);
  std::string module_action(const char* hook) const { return profiler.on() ? module_type + hook : std::string(); }
  // trainer_spawn.cpp: forks the workers, waits, takes rank 0's results into `m`.
  void fit_spawn(LightningBase& m, DataLoader& train, DataLoader* val, const std::string& ckpt);
};

}  // namespace pl
