// Validation and test as the trainer drives them (Trainer::validate / test, and fit's validation):
//
//   every batch:
//     one replica (single_device, ddp, ...): validation_step / test_step on the whole batch on this
//       thread (or forward_step when split_eval_step()), then *_step_end with one output
//     dp/ddp2 (n replicas): the batch split as training splits it (ReplicaSplit: torch's scatter),
//       strategy.run_step runs each replica's part on its own thread: validation_step / test_step
//       on its slice (or forward_step when split_eval_step()); the replicas' log() calls are
//       merged as training's are; then *_step_end(outputs) on the root's thread, each forward
//       result copied to the root's device
//   epoch end: pl::Metric objects logged from the steps computed, the logged values reduced
//   (sync_dist, epoch means) as in training
// Callbacks' on_{validation,test}_{start,epoch_start,batch_start,batch_end,epoch_end,end} around
// these, and the progress bar's stage.
//
// Lightning calls validation_step_end / test_step_end "regardless of the backend": here too, one
// output per replica that got rows.  The replicas' values are copied from the root once per loop:
// the strategy copies them only when it knows the root changed (setup, an optimizer step), while
// evaluation also follows changes it cannot see (weights the program loaded before validate).
// Its run_step takes the copy the strategy owed after an optimizer step, so the next training step
// copies once itself (replicas_need_copy): a root changed in between still reaches the replicas.
#include "trainer_impl.hpp"

namespace pl {

std::map<std::string, double> Trainer::Impl::eval_loop(DataLoader& loader, bool test, bool sanity) {
  LightningBase& m = *module;
  const plrt::sdk::Profiler::Span timed(&profiler, sanity ? "run_sanity_check" : test ? "run_test" : "run_validation");
  strategy.sync_weights();  // ABI 1.6: every rank evaluates the same model
  if (num_replicas > 1) {
    copy_root_to_replicas();
    replicas_need_copy = true;  // the next training step copies again (see trainer_impl.hpp)
  }
  // eval mode on the module and its replicas; their modes come back afterwards, also on an error
  struct Modes {
    std::vector<std::pair<TrainerModel*, bool>> saved;
    ~Modes() {
      for (auto& [mod, was] : saved) mod->train(was);
    }
  } modes;
  modes.saved.emplace_back(model.get(), model->training());
  for (auto& rep : replicas) modes.saved.emplace_back(rep.get(), rep->training());
  for (auto& [mod, was] : modes.saved) mod->train(false);

  // in fit, training's metrics were computed at its epoch's end: anything left is an interrupted loop's
  metrics.forget_metrics();
  each_callback(test ? "on_test_start" : "on_validation_start",
                [&](Callback& c) { test ? c.on_test_start(*self, m) : c.on_validation_start(*self, m); });
  each_callback(test ? "on_test_epoch_start" : "on_validation_epoch_start",
                [&](Callback& c) { test ? c.on_test_epoch_start(*self, m) : c.on_validation_epoch_start(*self, m); });
  test ? m.on_test_epoch_start() : m.on_validation_epoch_start();
  loader.set_epoch(0);
  int64_t batches = (test ? o.limit_test_batches : o.limit_val_batches)
                        .of(loader.num_batches(), test ? "limit_test_batches" : "limit_val_batches");
  if (sanity && o.num_sanity_val_steps >= 0) batches = std::min(batches, o.num_sanity_val_steps);
  progress_start(sanity ? "sanity check" : test ? "test" : "validate", batches);
  for (int64_t b = 0; b < batches; ++b) {
    const Batch batch = to_device(loader.batch(b));
    each_callback(test ? "on_test_batch_start" : "on_validation_batch_start", [&](Callback& c) {
      test ? c.on_test_batch_start(*self, m, batch, b) : c.on_validation_batch_start(*self, m, batch, b);
    });
    {
      in_eval_step = true;  // log(name, Metric&) from the step: computed at the loop's end
      struct Done {
        bool& f;
        ~Done() { f = false; }
      } done{in_eval_step};
      const plrt::sdk::Profiler::Span step_timed(&profiler, module_action(test ? "test_step" : "validation_step"));
      eval_batch(batch, b, test);
    }
    progress_step(b + 1);
    each_callback(test ? "on_test_batch_end" : "on_validation_batch_end", [&](Callback& c) {
      test ? c.on_test_batch_end(*self, m, batch, b) : c.on_validation_batch_end(*self, m, batch, b);
    });
  }
  each_callback(test ? "on_test_epoch_end" : "on_validation_epoch_end",
                [&](Callback& c) { test ? c.on_test_epoch_end(*self, m) : c.on_validation_epoch_end(*self, m); });
  test ? m.on_test_epoch_end() : m.on_validation_epoch_end();  // after the callbacks', as Lightning
  auto values = metrics.reduce_epoch(collectives());
  metrics.take_step_values();
  if (sanity) {  // Lightning's: what the sanity check logged is not kept
    values.clear();
  } else {
    auto& settled_values = settled();
    for (const auto& kv : values) settled_values[kv.first] = kv.second;
  }
  progress_end();
  each_callback(test ? "on_test_end" : "on_validation_end",
                [&](Callback& c) { test ? c.on_test_end(*self, m) : c.on_validation_end(*self, m); });
  return values;
}

void Trainer::Impl::eval_batch(const Batch& batch, int64_t b, bool test) {
  const int n = num_replicas;
  const bool split = model->split_eval_step();
  const ReplicaSplit parts = ReplicaSplit::of(batch, n);
  batch_size = parts.rows;  // the weight of what the root logs (in *_step_end, or the step itself)
  std::vector<ReplicaOutput> outputs(static_cast<size_t>(parts.used));
  for (int r = 0; r < parts.used; ++r) {
    outputs[static_cast<size_t>(r)].replica = r;
    outputs[static_cast<size_t>(r)].batch_size = parts.sizes[static_cast<size_t>(r)];
  }
  if (n == 1) {
    outputs[0].batch = batch;
    model->eval_step(outputs[0], b, test, precision.compute_dtype);
  } else {
    replica_logs.assign(static_cast<size_t>(n), {});
    strategy.run_step([&](int r, int, PL_Device) {
      if (r >= parts.used) return;  // no rows for this replica
      ReplicaScope scope(r);
      ReplicaOutput& out = outputs[static_cast<size_t>(r)];
      out.batch = parts.slice(batch, r);
      for (auto& t : out.batch) t = t.to(acc, replica_devices[static_cast<size_t>(r)]);
      model_of(r).eval_step(out, b, test, precision.compute_dtype);
    });
    merge_replica_logs(parts.sizes);
  }
  if (split)
    for (auto& out : outputs) {
      if (!out.output.defined())
        throw Error(PL_ERR_INVALID_ARGUMENT, "forward_step of replica " + std::to_string(out.replica) +
                                                 " returned an undefined tensor in " + (test ? "test" : "validation") +
                                                 " (split_eval_step() is true: it must return the output)");
      out.output = out.output.to(acc, device);
    }
  model->eval_step_end(outputs, test, precision.compute_dtype);
}

// Every replica's parameters and buffers := the root's (attach_replicas checked that they match).
void Trainer::Impl::copy_root_to_replicas() {
  auto params = model->parameters();
  auto buffers = model->buffers();
  for (auto& rep : replicas) {
    auto rp = rep->parameters();
    auto rb = rep->buffers();
    for (size_t i = 0; i < params.size() && i < rp.size(); ++i) rp[i].second->value.copy_from(params[i].second->value);
    for (size_t i = 0; i < buffers.size() && i < rb.size(); ++i) rb[i].second->copy_from(*buffers[i].second);
  }
}

}  // namespace pl
