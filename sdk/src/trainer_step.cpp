// One training step as the trainer drives it through the strategy:
//
//   run_step ──► replica r's TrainerModel (dp/ddp2: one per device, each in its own thread; else
//                  the module's): training_step on the replica's slice with the step's StepScales
//                  (gradients × 1/accumulate (1/replicas too for one-phase steps: dp's mean), the
//                  16-mixed loss scale, the autocast dtype), or forward_step ... training_step_end
//                  ... backward_step for two-phase steps
//   training_step_end(outputs) on the root thread → the step's loss
//   after_backward ─► the strategy: replica gradients into the root's, ddp's bucket allreduce, ...
//   at the accumulation boundary: GradScaler unscale + inf check → gradient clipping → optimizer step
//                                 (or skip)
//
// Replicas split the batch as torch.nn.parallel.scatter does: chunks of ceil(B / replicas) rows,
// so the last replicas may get fewer rows, or none (their gradients are zeros).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "trainer_impl.hpp"

namespace plrt::sdk {

std::vector<PL_Parameter> parameter_views(pl::TrainerModel& m, std::vector<std::string>& names) {
  std::vector<PL_Parameter> out;
  names.clear();
  for (auto& [name, p] : m.parameters()) {
    PL_Parameter cp{};
    cp.struct_size = sizeof cp;
    cp.value = p->value.view();
    cp.grad = p->grad.defined() ? p->grad.view()
                                : PL_Tensor{sizeof(PL_Tensor), nullptr, p->value.dtype(), p->value.device(), 0, 0, {0}};
    cp.requires_grad = p->requires_grad ? 1 : 0;
    cp.kind = p->requires_grad ? PL_PARAM_TRAINABLE : PL_PARAM_FROZEN;  // frozen: requires_grad false
    names.push_back(name);
    out.push_back(cp);
  }
  for (auto& [name, b] : m.buffers()) {
    PL_Parameter cp{};
    cp.struct_size = sizeof cp;
    cp.value = b->view();
    cp.grad = PL_Tensor{sizeof(PL_Tensor), nullptr, b->dtype(), b->device(), 0, 0, {0}};
    cp.requires_grad = 0;
    cp.kind = PL_PARAM_BUFFER;
    names.push_back(name);
    out.push_back(cp);
  }
  return out;
}

}  // namespace plrt::sdk

namespace pl {

ReplicaSplit ReplicaSplit::of(const Batch& batch, int n) {
  ReplicaSplit s;
  s.n = n;
  s.rows = batch.empty() || batch[0].dim() == 0 ? 1 : batch[0].size(0);
  s.chunk = n == 1 ? s.rows : std::max<int64_t>(1, (s.rows + n - 1) / n);
  s.used = n == 1 ? 1 : static_cast<int>(std::min<int64_t>(n, (s.rows + s.chunk - 1) / s.chunk));
  s.sizes.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    const int64_t begin = r * s.chunk;
    s.sizes[static_cast<size_t>(r)] = n == 1 ? s.rows : r < s.used ? std::min(s.chunk, s.rows - begin) : 0;
  }
  return s;
}

Batch ReplicaSplit::slice(const Batch& batch, int r) const {
  if (n == 1) return batch;
  Batch out;
  for (const auto& t : batch)
    out.push_back(t.dim() > 0 && t.size(0) == rows ? t.narrow(r * chunk, sizes[static_cast<size_t>(r)]) : t);
  return out;
}

// Replicas for dp/ddp2: one model per extra device, registered with the strategy.
void Trainer::Impl::attach_replicas() {
  num_replicas = strategy.num_replicas();
  replicas.clear();
  replica_devices.assign(1, device);
  if (num_replicas == 1) return;
  if (static_cast<size_t>(num_replicas) != job.devices.size())
    throw Error(PL_ERR_RUNTIME, "strategy '" + job.strategy + "' drives " + std::to_string(num_replicas) +
                                    " replicas but the job has " + std::to_string(job.devices.size()) + " devices");
  for (int r = 1; r < num_replicas; ++r) {
    std::unique_ptr<TrainerModel> rep = model->replicate(self);
    PL_Device d{job.device_type, job.devices[static_cast<size_t>(r)]};
    if (job.device_type == PL_DEVICE_CPU) d.index = r;  // CPU "devices": host memory, told apart by index
    rep->place(acc, d);
    std::vector<std::string> names;
    std::vector<PL_Parameter> params = plrt::sdk::parameter_views(*rep, names);
    if (names != param_names)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "replicate() returned a module whose parameters and buffers differ from the "
                  "original's (" +
                      std::to_string(names.size()) + " entries vs " + std::to_string(param_names.size()) +
                      "); it must build the same architecture");
    for (size_t i = 0; i < params.size(); ++i) params[i].name = param_names[i].c_str();
    strategy.setup_replica(r, params);
    replicas.push_back(std::move(rep));
    replica_devices.push_back(d);
  }
}

Scalar Trainer::Impl::training_step(const Batch& batch, int64_t b) {
  TrainerModel& m = *model;
  const double base = 1.0 / o.accumulate_grad_batches;
  const double loss_scale = scaler ? scaler->scale() : 1.0;
  const int n = num_replicas;
  const bool split = m.split_step();
  const ReplicaSplit split_of = ReplicaSplit::of(batch, n);
  const int used = split_of.used;
  const std::vector<int64_t>& sizes = split_of.sizes;
  // two-phase steps and one replica: 1/accumulate; one-phase steps over several: dp's mean too
  const StepScales scales{split ? base : base / used, loss_scale, precision.compute_dtype};
  std::vector<ReplicaOutput> outputs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    outputs[static_cast<size_t>(r)].replica = r;
    outputs[static_cast<size_t>(r)].batch_size = sizes[static_cast<size_t>(r)];
  }
  if (n > 1) replica_logs.assign(static_cast<size_t>(n), {});
  if (n > 1 && replicas_need_copy) copy_root_to_replicas();  // evaluation ran since the last step
  replicas_need_copy = false;
  auto replica_batch = [&](int r) -> Batch {
    if (n == 1) return batch;
    Batch s = split_of.slice(batch, r);
    for (auto& t : s) t = t.to(acc, replica_devices[static_cast<size_t>(r)]);
    return s;
  };

  in_training_step = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{in_training_step};
  // phase 1: training_step (or forward_step) on every replica
  strategy.run_step([&](int r, int, PL_Device) {
    ReplicaScope scope(n > 1 ? r : -1);
    TrainerModel& mod = model_of(r);
    if (r > 0) mod.zero_grad();
    if (r >= used) {
      mod.fill_unwritten_grads();
      return;
    }
    Batch s = replica_batch(r);
    ReplicaOutput& out = outputs[static_cast<size_t>(r)];
    out.batch = s;
    if (split) {
      out.output = mod.forward_step(s, b, scales);
    } else {
      out.loss = mod.training_step(s, b, scales);
      if (n > 1) mod.fill_unwritten_grads();
    }
  });
  if (n > 1) merge_replica_logs(sizes);
  outputs.resize(static_cast<size_t>(used));
  if (!split) return m.training_step_end(outputs, scales);

  // two-phase: the whole batch's loss on the root, then backward on every replica
  for (auto& out : outputs) {
    if (!out.output.defined())
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "forward_step of replica " + std::to_string(out.replica) + " returned an undefined tensor");
    out.output = out.output.to(acc, device);
  }
  const Scalar loss = m.training_step_end(outputs, scales);
  for (const auto& out : outputs)
    if (!out.output_grad.defined() || out.output_grad.shape() != out.output.shape())
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "training_step_end must set outputs[" + std::to_string(out.replica) +
                      "].output_grad to d(loss)/d(output), shaped " + shape_text(out.output.shape()) +
                      (out.output_grad.defined() ? "; it is " + shape_text(out.output_grad.shape()) : ""));
  strategy.run_step([&](int r, int, PL_Device) {
    ReplicaScope scope(n > 1 ? r : -1);
    TrainerModel& mod = model_of(r);
    if (r >= used) return;  // zeroed in phase 1
    mod.backward_step(outputs[static_cast<size_t>(r)].output_grad.to(acc, replica_devices[static_cast<size_t>(r)]),
                      scales);
    if (n > 1) mod.fill_unwritten_grads();
  });
  if (n > 1) merge_replica_logs(sizes);
  return loss;
}

// Values the replicas logged in one step, combined into one per name as Lightning's dp reduces
// them: reduce_fx across replicas (the mean weighted by each replica's rows), then logged once
// for the whole batch (with training_step's logging defaults in training, the evaluation ones in
// validation and test: trainer_eval.cpp).
void Trainer::Impl::merge_replica_logs(const std::vector<int64_t>& batch_sizes) {
  struct Merged {
    LogOptions options;
    std::vector<std::pair<Scalar, double>> parts;  // each replica's value and weight
    int64_t rows = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Merged> merged;
  for (size_t r = 0; r < replica_logs.size(); ++r)
    for (const auto& e : replica_logs[r]) {
      auto [it, fresh] = merged.try_emplace(e.name);
      if (fresh) order.push_back(e.name), it->second.options = e.options;
      Merged& g = it->second;
      // the replica's rows, unless the log call named its own batch_size
      const int64_t rows = e.batch_size > 0 ? e.batch_size : batch_sizes[r];
      g.parts.emplace_back(e.value, static_cast<double>(std::max<int64_t>(1, rows)));
      g.rows += rows;
    }
  replica_logs.clear();
  for (const auto& name : order) {
    const Merged& g = merged[name];
    // read when the merged value is: the replicas' values may still be on their devices
    const Scalar v = Scalar::deferred([parts = g.parts, fx = g.options.reduce_fx] {
      double weighted = 0, weight = 0, sum = 0;
      double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
      for (const auto& [value, w] : parts) {
        const double x = value.value();
        weighted += x * w, weight += w, sum += x;
        min = std::min(min, x), max = std::max(max, x);
      }
      return fx == Reduce::Sum ? sum : fx == Reduce::Min ? min : fx == Reduce::Max ? max : weighted / weight;
    });
    metrics.log(name, v, g.options, g.rows, in_training_step, rank, collectives());
  }
}

// The accumulation boundary: unscale (16-mixed) and check the gradients this rank holds
// (grad_ranges), every rank agrees on skipping (the strategy's agree_skip, else the maximum over its
// process group), gradient clipping (trainer_clip.cpp) unless skipped, then the optimizer step (the
// strategy's optimizer_step on the ranges it picks, else every trainable parameter whole).
void Trainer::Impl::optimizer_step() {
  const plrt::sdk::Profiler::Span timed(&profiler, "optimizer_step");
  strategy.before_optimizer_step();
  bool skip = false;
  if (scaler) {
    const bool found_inf = scaler->unscale(optimizer->params(), grad_ranges);
    if (strategy.has_agree_skip()) {
      skip = strategy.agree_skip(found_inf);
    } else {
      std::vector<double> x{found_inf ? 1.0 : 0.0};
      plrt::sdk::Collectives(rt->host(), strategy.pg_api(), strategy.pg(), world).allreduce(x, PL_REDUCE_MAX);
      skip = x[0] != 0;
    }
    const double before = scaler->scale();
    scaler->update(skip);
    if (skip)
      rt->log(PL_LOG_DEBUG, "16-mixed: inf/NaN gradients at step " + std::to_string(step) +
                                ", optimizer step skipped, "
                                "loss scale " +
                                std::to_string(before) + " -> " + std::to_string(scaler->scale()));
  }
  // Lightning's on_before_optimizer_step: after unscaling, before clipping (also on a skipped step)
  if (module != nullptr)
    each_callback("on_before_optimizer_step",
                  [&](Callback& c) { c.on_before_optimizer_step(*self, *module, *optimizer); });
  if (!skip) clip_gradients();
  if (!skip && strategy.has_optimizer_step())
    strategy.optimizer_step([this](const PL_ParamRange* r, size_t n) { step_ranges(r, n); });
  else if (!skip)
    optimizer->step();
  strategy.after_optimizer_step();
  optimizer->zero_grad();
}

// The strategy's ranges (indices into setup's array) as the optimizer's: a range of a parameter
// the optimizer was not given is left alone (as optimizer->step() leaves it); a frozen parameter
// or a buffer is the strategy's error.
void Trainer::Impl::step_ranges(const PL_ParamRange* ranges, size_t n) {
  if (n > 0 && ranges == nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT, "strategy '" + job.strategy + "': optimizer_step passed " + std::to_string(n) +
                                             " ranges but a NULL array");
  std::unordered_map<const Parameter*, size_t> in_optimizer;
  for (size_t i = 0; i < optimizer->params().size(); ++i) in_optimizer[optimizer->params()[i]] = i;
  std::vector<ParamRange> mine;
  for (size_t k = 0; k < n; ++k) {
    const PL_ParamRange& r = ranges[k];
    const std::string what = "strategy '" + job.strategy + "': optimizer_step range " + std::to_string(k);
    if (!PL_HAS_FIELD(PL_ParamRange, &r, end))
      throw Error(PL_ERR_VERSION, what + " has struct_size " + std::to_string(r.struct_size) +
                                      ", smaller than ABI 1.4's " + std::to_string(PL_STRUCT_SIZE(PL_ParamRange, end)));
    if (r.param_index >= c_params.size())
      throw Error(PL_ERR_INVALID_ARGUMENT, what + " names entry " + std::to_string(r.param_index) +
                                               " but setup registered " + std::to_string(c_params.size()) +
                                               " (valid: 0 to " + std::to_string(c_params.size()) + " - 1)");
    const PL_ParamKind kind = pl_parameter_kind(&c_params[r.param_index]);
    if (kind != PL_PARAM_TRAINABLE)
      throw Error(PL_ERR_INVALID_ARGUMENT, what + " names '" + param_names[r.param_index] + "', a " +
                                               (kind == PL_PARAM_FROZEN ? "frozen parameter" : "buffer") +
                                               "; only trainable parameters are stepped");
    auto it = in_optimizer.find(param_ptrs[r.param_index]);
    if (it == in_optimizer.end()) continue;
    mine.push_back({it->second, r.begin, r.end});
  }
  optimizer->step(mine);
}

void Trainer::Impl::use_optimizer(std::unique_ptr<Optimizer> opt) {
  if (!opt) throw Error(PL_ERR_INVALID_ARGUMENT, "configure_optimizers returned no optimizer");
  optimizer = std::move(opt);
  std::unordered_map<const Parameter*, size_t> in_optimizer;
  for (size_t i = 0; i < optimizer->params().size(); ++i) in_optimizer[optimizer->params()[i]] = i;
  grad_ranges.clear();
  sharded = strategy.has_owned_ranges();
  if (!sharded) {
    for (size_t i = 0; i < optimizer->params().size(); ++i) {
      const Parameter& p = *optimizer->params()[i];
      if (p.requires_grad) grad_ranges.push_back({i, 0, p.value.numel()});
    }
    return;
  }
  for (const PL_ParamRange& r : strategy.owned_ranges(c_params)) {
    auto it = in_optimizer.find(param_ptrs[r.param_index]);
    if (it != in_optimizer.end() && r.begin < r.end) grad_ranges.push_back({it->second, r.begin, r.end});
  }
}

// ABI 1.6: the strategy learns the optimizer; it may ask for the first moment in the gradients,
// which only QAdam gives (any other optimizer is an error naming it, before the first step).
// ABI 1.7: it may also ask for rank 0's optimizer state on every rank, and for the learning rate
// times a factor (horovod's scale_lr), applied in a run that starts from scratch only: a resumed
// run's checkpoint holds the rate it trained with.
void Trainer::Impl::bind_optimizer() {
  first_moment = nullptr;
  const auto asked = strategy.bind_optimizer(optimizer->name(), optimizer->hyperparameters(), optimizer->steps());
  if (asked.broadcast_optimizer_state) broadcast_optimizer_state();
  if (asked.lr_scale != 1.0) {
    auto g = [](double v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", v);
      return std::string(buf);
    };
    const std::string why = "strategy '" + job.strategy + "' asks for the learning rate x" + g(asked.lr_scale) +
                            (asked.lr_scale_reason.empty() ? "" : ": " + asked.lr_scale_reason);
    if (optimizer->steps() == 0) {
      const double before = optimizer->lr();
      optimizer->set_lr(before * asked.lr_scale);
      if (rank == 0) info("learning rate " + g(before) + " -> " + g(optimizer->lr()) + " (" + why + ")");
    } else if (rank == 0) {
      info("learning rate " + g(optimizer->lr()) + " kept from the checkpoint, which already trained with it (" + why +
           ", applied when the run started)");
    }
  }
  if (!asked.first_moment_in_grads) return;
  auto* q = dynamic_cast<QAdam*>(optimizer.get());
  if (q == nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT, "strategy '" + job.strategy +
                                             "' averages the optimizer's first moment, which only QAdam (pl::QAdam) "
                                             "supports; the module's optimizer is '" +
                                             optimizer->name() + "': return a pl::QAdam from configure_optimizers");
  q->set_first_moment_in_grads(true);
  first_moment = q;
  std::unordered_map<const Parameter*, size_t> in_optimizer;
  for (size_t i = 0; i < optimizer->params().size(); ++i) in_optimizer[optimizer->params()[i]] = i;
  opt_index.assign(param_ptrs.size(), SIZE_MAX);
  for (size_t k = 0; k < param_ptrs.size(); ++k) {
    auto it = in_optimizer.find(param_ptrs[k]);
    if (it != in_optimizer.end()) opt_index[k] = it->second;
  }
  formed.assign(param_ptrs.size(), 0);
}

void Trainer::Impl::form_first_moment(size_t k) {
  if (first_moment == nullptr || !boundary_now || k >= opt_index.size() || formed[k]) return;
  formed[k] = 1;
  if (opt_index[k] != SIZE_MAX) first_moment->form_first_moment(opt_index[k], scaler ? scaler->scale() : 1.0);
}

void Trainer::Impl::form_remaining() {
  if (first_moment == nullptr) return;
  if (boundary_now)
    for (size_t k = 0; k < formed.size(); ++k) form_first_moment(k);
  std::fill(formed.begin(), formed.end(), 0);
}

// Lightning's advice: scale the learning rate with the effective batch size, so say it at start.
void Trainer::Impl::report_effective_batch(const DataLoader& train) {
  const int64_t per = train.options().batch_size;
  // dp/ddp2 split each batch over their devices
  const bool split_batch = job.launch_mode == PL_LAUNCH_SINGLE_PROCESS && job.devices.size() > 1;
  effective_batch = per * (split_batch ? 1 : job.processes_per_node) * job.num_nodes;
  if (rank != 0 || !o.enable_progress_bar) return;
  std::string how = split_batch ? std::to_string(per) + " per batch split over " + std::to_string(job.devices.size()) +
                                      " device(s) x " + std::to_string(job.num_nodes) + " node(s)"
                                : std::to_string(per) + " per device x " + std::to_string(job.processes_per_node) +
                                      " device(s) x " + std::to_string(job.num_nodes) + " node(s)";
  std::string msg = "effective batch size " + std::to_string(effective_batch) + " (" + how + ")";
  if (o.accumulate_grad_batches > 1)
    msg += ", " + std::to_string(effective_batch * o.accumulate_grad_batches) +
           " per optimizer step with accumulate_grad_batches=" + std::to_string(o.accumulate_grad_batches);
  if (precision.compute_dtype != PL_DTYPE_INVALID) msg += "; precision " + precision.name;
  info(msg);
}

}  // namespace pl
