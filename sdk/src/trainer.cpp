// pl::Trainer: set-up (job, launcher, accelerator, store, strategy) and the fit/validate/test loops.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/staging.hpp>
#include <sstream>
#include <thread>

#include "trainer_impl.hpp"

namespace pl {

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

Trainer::Impl::Impl(TrainerOptions options, const RuntimeOptions& ro) : o(std::move(options)) {
  if (o.read_env) apply_env_overrides();
  check_options();
  apply_fast_dev_run();
  env = ClusterEnv::detect();
  RuntimeOptions r = ro;
  progress_setup(r, env.source == "none" || env.spawn_parent || env.rank == 0);
  session.start_runtime(r);
  if (o.seed) seed_everything(*o.seed);
  resolve_job();
  note_fast_dev_run();
}

JobRequest Trainer::Impl::request() const {
  JobRequest req;
  req.accelerator = o.accelerator;
  req.devices = o.devices;
  req.strategy = o.strategy;
  req.num_nodes = o.num_nodes;
  req.precision = o.precision;
  req.process_group_backend = o.process_group_backend;
  req.strategy_options = o.strategy_options;
  return req;
}

void Trainer::Impl::resolve_job() {
  session.resolve(request(), plrt::sdk::Driver::Trainer);
  precision = amp::Precision::parse(job.precision);
  if (precision.scaled) scaler = std::make_unique<amp::GradScaler>(o.grad_scaler);
}

void Trainer::Impl::prepare(LightningBase& m) {
  if (prepared) {
    if (module != &m)
      throw Error(PL_ERR_INVALID_ARGUMENT, "this trainer already drives another module; make a new Trainer");
    return;
  }
  // the cores shared by the processes (or dp's replica threads)
  const bool single_process = job.launch_mode == PL_LAUNCH_SINGLE_PROCESS;
  plrt::sdk::JobSession::OpenOptions oo;
  oo.accelerator_options = o.accelerator_options;
  oo.cpu_sharers = single_process ? static_cast<int>(job.devices.size()) : local_world;
  oo.timeout = o.timeout;
  oo.store_port = spawned_worker ? spawn_store_port : -1;
  session.open(oo);
  plrt::sdk::StrategySetup s = session.strategy_setup(o.strategy_options, o.timeout);
  if (single_process && job.devices.size() > 1) {  // dp/ddp2: this process drives every device
    s.device_ids.assign(job.devices.begin(), job.devices.end());
    if (job.device_type == PL_DEVICE_CPU)
      for (size_t i = 0; i < s.device_ids.size(); ++i) s.device_ids[i] = static_cast<int32_t>(i);
  }
  strategy.create(*rt, job.strategy, acc, s);
  set_seed_rank(rank);
  attach(m);
  prepared = true;
}

// Places the module on the device, hands its parameters to the strategy (ddp broadcasts rank 0's
// values) and routes grad_ready to the strategy's bucket logic.
void Trainer::Impl::attach(LightningBase& m) {
  module = &m;
  model = m.trainer_model();
  model->check_precision(precision.name, precision.compute_dtype);
  model->place(acc, device);
  param_index.clear();
  c_params = plrt::sdk::parameter_views(*model, param_names);
  param_ptrs.assign(c_params.size(), nullptr);
  borrowed.clear();
  size_t k = 0;
  for (auto& [name, p] : model->parameters()) {
    param_ptrs[k] = p;
    param_index[p] = k++;
    borrowed.push_back(p->value);
    if (p->grad.defined()) borrowed.push_back(p->grad);
  }
  for (auto& [name, b] : model->buffers()) borrowed.push_back(*b);
  for (size_t i = 0; i < c_params.size(); ++i) c_params[i].name = param_names[i].c_str();
  strategy.setup(c_params);
  // The hook holds a weak reference to this trainer: should the module be left hooked to a
  // trainer that is gone (the destructor unhooks it; see detach_module), it gets a clear error.
  std::weak_ptr<Impl*> token = alive;
  model->set_grad_ready_hook([token](size_t i) {
    auto live = token.lock();
    if (!live)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "this module's backward reported a gradient to a trainer that was destroyed; "
                  "attach the module to a live trainer (fit/validate/test) or unhook it with "
                  "set_grad_ready_hook(nullptr)");
    Impl& t = **live;
    t.form_first_moment(i);  // QAdam's m_i, when the strategy averages it (ABI 1.6)
    t.strategy.on_grad_ready(i);
  });
  attach_replicas();
}

void Trainer::Impl::distribute(DataLoader& loader, const char* stage) {
  if (has_seed() && loader.options().seed == 0) loader.set_seed(current_seed());
  if (world <= 1 || loader.distributed() || !o.use_distributed_sampler) return;
  loader.distribute(world, rank);
  if (std::string(stage) != "train" && loader.sampler() && loader.sampler()->padding() > 0 && rank == 0)
    warn(std::string("the ") + stage + " loader uses a DistributedSampler that repeats " +
         std::to_string(loader.sampler()->padding()) +
         " sample(s) so every rank gets the same count; the duplicates "
         "can skew the metrics. For exact numbers evaluate with devices=1 and num_nodes=1.");
}

Batch Trainer::Impl::to_device(const Batch& b) const {
  Batch out;
  out.reserve(b.size());
  for (const auto& t : b) out.push_back(t.to(acc, device));
  return out;
}

plrt::sdk::Collectives Trainer::Impl::collectives() {
  return plrt::sdk::Collectives(rt->host(), strategy.pg_api(), strategy.pg(), world, &strategy).profiled(&profiler);
}

void Trainer::Impl::fit_here(LightningBase& m, DataLoader& train, DataLoader* val, const std::string& ckpt) {
  use_callbacks(m);  // their errors before any work
  prepare(m);
  try {
    fit_loop(m, train, val, ckpt);
  } catch (const std::exception& e) {
    progress_close();  // the error's message starts on a line of its own
    each_callback("on_exception", [&](Callback& c) { c.on_exception(*self, m, e); });
    strategy.set_profiler(nullptr);
    profiler.begin(plrt::sdk::Profiler::Mode::off);
    throw;
  }
}

void Trainer::Impl::fit_loop(LightningBase& m, DataLoader& train, DataLoader* val, const std::string& ckpt) {
  distribute(train, "train");
  if (val) distribute(*val, "validation");
  // the limits' errors (a fraction that leaves no batch) before any work, the log folder included;
  // a limit of 0 skips the loop
  train.set_start(0);
  if (val && o.limit_val_batches.of(val->num_batches(), "limit_val_batches") == 0) val = nullptr;
  plan_validation(train, val);                    // limit_train_batches' and val_check_interval's errors
  const std::string from = resolve_resume(ckpt);  // "last": rank 0 decides, the others are told
  clean_leftovers(from);
  profile_begin();
  std::optional<plrt::sdk::Profiler::Span> fit_span;
  fit_span.emplace(&profiler, "fit");
  use_optimizer(model->configure_optimizers());
  if (!from.empty()) load_checkpoint(from);
  bind_optimizer();
  use_schedulers();  // after bind_optimizer: a strategy's lr_scale is in their base lr
  each_callback("setup", [&](Callback& c) { c.setup(*self, m, "fit"); });
  load_callbacks_state();  // after setup: ModelCheckpoint knows its folder
  should_stop = val_has_run = false;
  metrics.forget_metrics();  // a metric of an earlier, interrupted loop is not this fit's
  has_val = val != nullptr;
  resume_position(train);
  report_effective_batch(train);
  report_resume();
  last_checkpoint = std::chrono::steady_clock::now();
  reset_agreement();
  int64_t max_epochs = o.max_epochs.value_or(o.max_steps < 0 ? 1000 : -1);  // Lightning's None
  if (max_epochs < 0) max_epochs = INT64_MAX;
  each_callback("on_fit_start", [&](Callback& c) { c.on_fit_start(*self, m); });
  m.on_fit_start();
  sanity_check(val);
  each_callback("on_train_start", [&](Callback& c) { c.on_train_start(*self, m); });
  interrupted = false;
  sigterm_watch.emplace(watch_sigterm());
  struct EndWatch {
    std::optional<SigtermWatch>& w;
    ~EndWatch() { w.reset(); }
  } end_watch{sigterm_watch};
  while (epoch < max_epochs && !(o.max_steps >= 0 && step >= o.max_steps) && !(should_stop && can_stop_early())) {
    auto t0 = std::chrono::steady_clock::now();
    int64_t steps0 = step;
    train_epoch(train, val);
    if (interrupted) {           // SIGTERM: every rank stops after the same step, no epoch end (Lightning's)
      metrics.forget_metrics();  // the partial epoch's metrics are not logged (as its other epoch values)
      break;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    end_train_epoch(val, secs > 0 ? static_cast<double>(step - steps0) / secs : 0);
    if (stopped_in_epoch) break;  // max_steps or should_stop inside it: its end has run, fit ends
    ++epoch;
    epoch_samples = epoch_batches = 0;
    if (o.enable_checkpointing) save_last();
  }
  progress_close();
  settled();                // a fit that ends inside an epoch: its last steps' values and loss checks are read here
  strategy.sync_weights();  // ABI 1.6: fit ends with one model on every rank
  each_callback("on_train_end", [&](Callback& c) { c.on_train_end(*self, m); });
  each_callback("on_fit_end", [&](Callback& c) { c.on_fit_end(*self, m); });  // callbacks first, as Lightning
  m.on_fit_end();
  if ((o.enable_checkpointing && stopped_in_epoch) || interrupted) save_last();
  if (interrupted && rank == 0)
    warn("SIGTERM: every rank stopped after step " + std::to_string(step) + "; checkpoint written to " + log_dir +
         "/checkpoints/last (resume from it)");
  loggers.flush();
  each_callback("teardown", [&](Callback& c) { c.teardown(*self, m, "fit"); });
  fit_span.reset();
  profile_end();
}

// One epoch from the position the trainer is at (epoch_samples: a resumed checkpoint's, else 0).
// Batch j of the loader is the epoch's batch `base + j` for training_step (base: the batches this
// world size would have taken to reach the position); accumulation windows count from the start,
// which is always an optimizer-step boundary.
void Trainer::Impl::train_epoch(DataLoader& train, DataLoader* val) {
  LightningBase& m = *module;
  const plrt::sdk::Profiler::Span epoch_span(&profiler, "run_training_epoch");
  train.set_epoch(epoch);
  const int64_t start = epoch_samples;
  train.set_start(std::min(start, train.dataset().size()));
  stopped_in_epoch = stop_validates = val_ran = false;
  const int64_t per_batch = train.options().batch_size * (train.distributed() ? train.sampler()->num_replicas() : 1);
  const int64_t base = start / per_batch;
  // limit_train_batches counts from the epoch's first batch: a resumed epoch takes what is left of it
  const int64_t n = std::max<int64_t>(
      0, std::min(train.num_batches(),
                  o.limit_train_batches.of(base + train.num_batches(), "limit_train_batches") - base));
  // samples_trained: a loader this trainer did not shard holds this rank's data only
  const int64_t others = !train.distributed() && world > 1 ? world : 1;
  if (start == 0) {
    each_callback("on_train_epoch_start", [&](Callback& c) { c.on_train_epoch_start(*self, m); });
    m.on_train_epoch_start();
  }
  progress_start("train", base + n, base);
  const int acc_n = o.accumulate_grad_batches;
  bool sync_on = true;
  bool stop_now = false, stop_alone = false;  // should_stop after this batch's step (see below)
  int64_t window_samples = 0;
  // On an asynchronous device (cuda) the next batches are copied ahead on a copy stream, through
  // pinned memory, while this one computes; on the cpu batches are simply read in turn.
  std::unique_ptr<StagingLoader> staging;
  if (!acc.synchronous() && device.type != PL_DEVICE_CPU) {
    staging = std::make_unique<StagingLoader>(train, acc, device, 2);
    staging->start(0);
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t b = base + j;
    if (o.max_steps >= 0 && step >= o.max_steps) {
      stopped_in_epoch = epoch_samples > 0;  // at j == 0 the epoch has not begun: it ends as before
      return;
    }
    Batch batch;
    {
      const plrt::sdk::Profiler::Span timed(&profiler, "train_dataloader_next");
      if (!staging) {
        batch = to_device(train.batch(j));
      } else if (!staging->next(batch)) {
        throw Error(PL_ERR_INTERNAL,
                    "the staging loader ended at batch " + std::to_string(j) + " of " + std::to_string(n));
      }
    }
    std::optional<plrt::sdk::Profiler::Span> batch_span;
    batch_span.emplace(&profiler, "run_training_batch");
    batch_size = batch.empty() || batch[0].dim() == 0 ? 1 : batch[0].size(0);
    bool boundary = (j + 1) % acc_n == 0 || j + 1 == n;
    if (boundary != sync_on) strategy.set_grad_sync(sync_on = boundary);
    boundary_now = boundary;
    window_samples += train.real_samples(j) * others;
    each_callback("on_train_batch_start", [&](Callback& c) { c.on_train_batch_start(*self, m, batch, b); });
    Scalar loss;
    {
      const plrt::sdk::Profiler::Span timed(&profiler, module_action("training_step"));
      loss = training_step(batch, b);
    }
    form_remaining();
    strategy.after_backward();
    unchecked_losses.push_back({epoch, b, loss});  // not read now: a cuda step need not wait here
    if (unchecked_losses.size() >= 64) check_losses();
    if (boundary) {
      optimizer_step();
      ++step;
      step_schedulers("step", b + 1, {});
      samples_trained += window_samples;
      window_samples = 0;
      epoch_samples = train.position_after(j + 1);
      epoch_batches = b + 1;
      auto values = metrics.take_step_values();
      for (const auto& kv : values) unread[kv.first] = kv.second;
      if (step % o.log_every_n_steps == 0 && !values.empty() && loggers.wants_rows()) {
        std::map<std::string, double> row;
        for (const auto& kv : values) row[kv.first] = kv.second.value();
        loggers.add_row(epoch, step - 1, row);
      }
      const StepAgreement next = agree_after_step();
      if (next.stop) {  // preempted: every rank stops after this same step
        interrupted = true;
        return;
      }
      // Not at the epoch's end (its checkpoint follows) nor at max_steps (fit's last one follows).
      const bool more = j + 1 < n && !(o.max_steps >= 0 && step >= o.max_steps);
      if (more && (next.save || checkpoint_due_by_steps())) save_last();
      stop_now = more && next.should_stop;
      stop_alone = more && world <= 1;
    }
    each_callback("on_train_batch_end", [&](Callback& c) { c.on_train_batch_end(*self, m, loss, batch, b); });
    batch_span.reset();
    progress_step(b + 1);
    // should_stop, agreed by every rank (alone: as soon as a hook set it, Lightning's way): the
    // epoch ends at this optimizer step, as max_steps ends it, and its end validates
    if ((stop_now || (stop_alone && should_stop)) && can_stop_early()) {
      should_stop = stopped_in_epoch = stop_validates = true;
      return;
    }
    // val_check_interval's validation inside the epoch (at its last batch: the epoch's end runs it)
    if (val && j + 1 < n && validates_after(b)) {
      fit_validation(*val, true);
      if (should_stop && can_stop_early()) {  // agreed in fit_validation
        stopped_in_epoch = true;
        return;
      }
      progress_start("train", base + n, b + 1);
    }
  }
  if (!sync_on) strategy.set_grad_sync(true);
}

void Trainer::Impl::end_train_epoch(DataLoader* val, double steps_per_s) {
  LightningBase& m = *module;
  auto values = metrics.reduce_epoch(collectives());
  const int64_t last = epoch_batches - 1;  // the epoch's last batch run (-1: none)
  const bool validate =
      val && (stopped_in_epoch ? stop_validates && validates_in_epoch() : last >= 0 && validates_after(last));
  if (validate) {
    auto v = fit_validation(*val, false);
    values.insert(v.begin(), v.end());
  }
  each_callback("on_train_epoch_end", [&](Callback& c) {
    if (!c.monitors()) c.on_train_epoch_end(*self, m);
  });
  m.on_train_epoch_end();
  auto late = metrics.reduce_epoch(collectives());  // values logged in on_train_epoch_end
  values.insert(late.begin(), late.end());
  end_epoch_log(values, steps_per_s);
  if (!stopped_in_epoch) step_schedulers("epoch", epoch + 1, values);  // Lightning's: a whole epoch only
  monitoring_epoch_end(!stopped_in_epoch);  // ModelCheckpoint, EarlyStopping; the ranks agree on should_stop
}

std::map<std::string, double>& Trainer::Impl::settled() {
  for (auto& [name, value] : unread) callback[name] = value.value();
  unread.clear();
  check_losses();
  return callback;
}

void Trainer::Impl::check_losses() {
  std::vector<LossCheck> losses;
  losses.swap(unchecked_losses);
  for (const auto& l : losses)
    if (!std::isfinite(l.loss.value()))
      warn("training_step returned a non-finite loss at epoch " + std::to_string(l.epoch) + ", batch " +
           std::to_string(l.batch));
}

void Trainer::Impl::end_epoch_log(const std::map<std::string, double>& values, double steps_per_s) {
  auto& settled_values = settled();
  for (const auto& kv : values) settled_values[kv.first] = kv.second;
  loggers.add_row(epoch, step > 0 ? step - 1 : 0, values);
  loggers.flush();
  if (progress_end() || rank != 0 || !o.enable_progress_bar) return;  // the bar's finished line replaces it
  std::ostringstream os;
  os << "epoch " << epoch;
  if (o.max_epochs.value_or(0) > 0) os << "/" << *o.max_epochs - 1;
  for (const auto& kv : values) os << "  " << kv.first << "=" << fmt(kv.second);
  os << "  [" << step << " steps, " << fmt(steps_per_s) << " steps/s]";
  info(os.str());
}

// ---- the public face ----

Trainer::Trainer(TrainerOptions options, RuntimeOptions runtime)
    : impl_(std::make_unique<Impl>(std::move(options), runtime)) {
  impl_->self = this;
}
Trainer::~Trainer() = default;

// The module may outlive the trainer: it must not call the hook that captured this trainer.  Then
// the members go, the strategy torn down first (see the member order in trainer_impl.hpp).
Trainer::Impl::~Impl() { detach_module(); }

void Trainer::Impl::adopt(LightningBase& m) {
  if (prepared && module != &m)
    throw Error(PL_ERR_INVALID_ARGUMENT, "this trainer already drives another module; make a new Trainer");
  if (m.trainer_ != nullptr && m.trainer_ != self) m.link_->forget_module(&m);
  m.trainer_ = self;
  m.link_ = this;
  adopted = &m;
}

void Trainer::Impl::detach_module() {
  if (adopted != nullptr) {
    if (adopted == module && model) model->set_grad_ready_hook({});  // this trainer's hook
    adopted->trainer_ = nullptr;
    adopted->link_ = nullptr;
  }
  adopted = module = nullptr;
  model.reset();
}

void Trainer::fit(LightningBase& module, DataLoader& train, DataLoader* val, const std::string& ckpt_path) {
  if (impl_->job.launch_mode == PL_LAUNCH_SPAWN && !impl_->spawned_worker && impl_->world > 1) {
    Impl::check_resume_path(ckpt_path);
    return impl_->fit_spawn(module, train, val, ckpt_path);
  }
  Impl::check_resume_path(ckpt_path);
  impl_->adopt(module);
  impl_->fit_here(module, train, val, ckpt_path);
}

std::map<std::string, double> Trainer::validate(LightningBase& module, DataLoader& loader) {
  if (impl_->job.launch_mode == PL_LAUNCH_SPAWN && !impl_->spawned_worker && impl_->world > 1)
    throw Error(PL_ERR_UNSUPPORTED,
                "validate with ddp_spawn runs in this process only after fit; use strategy 'ddp' "
                "under plrun for distributed validation");
  return impl_->evaluate(module, loader, false);
}

std::map<std::string, double> Trainer::test(LightningBase& module, DataLoader& loader) {
  if (impl_->job.launch_mode == PL_LAUNCH_SPAWN && !impl_->spawned_worker && impl_->world > 1)
    throw Error(PL_ERR_UNSUPPORTED,
                "test with ddp_spawn runs in this process only after fit; use strategy 'ddp' "
                "under plrun for distributed testing");
  return impl_->evaluate(module, loader, true);
}

// Trainer::validate / test: the stage with its callbacks' setup and teardown.
std::map<std::string, double> Trainer::Impl::evaluate(LightningBase& m, DataLoader& loader, bool test) {
  const char* stage = test ? "test" : "validate";
  adopt(m);
  use_callbacks(m);
  prepare(m);
  open_log_dir("");
  distribute(loader, test ? "test" : "validation");
  each_callback("setup", [&](Callback& c) { c.setup(*self, m, stage); });
  std::map<std::string, double> out;
  try {
    out = eval_loop(loader, test);
  } catch (const std::exception& e) {
    progress_close();
    each_callback("on_exception", [&](Callback& c) { c.on_exception(*self, m, e); });
    throw;
  }
  each_callback("teardown", [&](Callback& c) { c.teardown(*self, m, stage); });
  return out;
}

void Trainer::save_checkpoint(const std::string& path) { impl_->save_checkpoint(path); }
TrainerModel* Trainer::model() const { return impl_->model.get(); }
int Trainer::global_rank() const { return impl_->rank; }
int Trainer::world_size() const { return impl_->world; }
int Trainer::local_rank() const { return impl_->local_rank; }
int Trainer::node_rank() const { return impl_->node_rank; }
int64_t Trainer::current_epoch() const { return impl_->epoch; }
int64_t Trainer::global_step() const { return impl_->step; }
bool Trainer::interrupted() const { return impl_->interrupted; }
int64_t Trainer::samples_trained() const { return impl_->samples_trained; }
int64_t Trainer::restart_count() const { return impl_->restart_count; }
std::string Trainer::resumed_from() const { return impl_->resumed_from; }
const TrainerOptions& Trainer::options() const { return impl_->o; }
const JobConfig& Trainer::job() const { return impl_->job; }
const ClusterEnv& Trainer::cluster() const { return impl_->env; }
const Runtime& Trainer::runtime() const { return *impl_->rt; }
std::string Trainer::log_dir() const { return impl_->log_dir; }
const std::map<std::string, double>& Trainer::callback_metrics() const { return impl_->settled(); }
double Trainer::strategy_stat(const std::string& name) const { return impl_->strategy.stat(name); }
int64_t Trainer::optimizer_state_bytes() const {
  if (!impl_->optimizer) return 0;
  size_t total = 0;
  for (const auto& [name, t] : impl_->optimizer->state_tensors()) total += t.nbytes();
  return static_cast<int64_t>(total);
}
int64_t Trainer::effective_batch_size() const { return impl_->effective_batch; }
double Trainer::loss_scale() const { return impl_->scaler ? impl_->scaler->scale() : 1.0; }
int64_t Trainer::skipped_steps() const { return impl_->scaler ? impl_->scaler->skipped_steps() : 0; }
int Trainer::num_replicas() const { return impl_->num_replicas; }

}  // namespace pl
