// Trainer::predict, Lightning's prediction loop: setup("predict"), then on the module in eval mode
// (its mode comes back afterwards, also on an error) on_predict_start, on_predict_epoch_start,
// for each of limit_predict_batches batches on_predict_batch_start, predict_step under the
// precision's autocast, on_predict_batch_end with its output; on_predict_epoch_end (callbacks, then
// the module, as Lightning), on_predict_end, teardown("predict").  Nothing is logged and no log
// folder is made; the predictions stay where predict_step made them (the device), copied when the
// module still holds them (a layer's reused activation buffer).
#include "trainer_impl.hpp"

namespace pl {

std::vector<Tensor> Trainer::predict(LightningBase& module, DataLoader& loader) {
  if (impl_->job.launch_mode == PL_LAUNCH_SPAWN && !impl_->spawned_worker && impl_->world > 1)
    throw Error(PL_ERR_UNSUPPORTED,
                "predict with ddp_spawn runs in this process only after fit; use strategy 'ddp' "
                "under plrun for distributed prediction");
  return impl_->predict(module, loader);
}

std::vector<Tensor> Trainer::Impl::predict(LightningBase& m, DataLoader& loader) {
  adopt(m);
  use_callbacks(m);
  prepare(m);
  distribute(loader, "predict");
  each_callback("setup", [&](Callback& c) { c.setup(*self, m, "predict"); });
  std::vector<Tensor> out;
  try {
    out = predict_loop(loader);
  } catch (const std::exception& e) {
    progress_close();
    each_callback("on_exception", [&](Callback& c) { c.on_exception(*self, m, e); });
    throw;
  }
  each_callback("teardown", [&](Callback& c) { c.teardown(*self, m, "predict"); });
  return out;
}

std::vector<Tensor> Trainer::Impl::predict_loop(DataLoader& loader) {
  LightningBase& m = *module;
  strategy.sync_weights();  // ABI 1.6: every rank predicts with the same model
  struct Mode {
    TrainerModel& m;
    bool was;
    ~Mode() { m.train(was); }
  } mode{*model, model->training()};
  model->train(false);
  each_callback("on_predict_start", [&](Callback& c) { c.on_predict_start(*self, m); });
  each_callback("on_predict_epoch_start", [&](Callback& c) { c.on_predict_epoch_start(*self, m); });
  m.on_predict_epoch_start();
  loader.set_epoch(0);
  const int64_t batches = o.limit_predict_batches.of(loader.num_batches(), "limit_predict_batches");
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(batches));
  progress_start("predict", batches);
  for (int64_t b = 0; b < batches; ++b) {
    const Batch batch = to_device(loader.batch(b));
    each_callback("on_predict_batch_start", [&](Callback& c) { c.on_predict_batch_start(*self, m, batch, b); });
    Tensor prediction;
    prediction = model->predict_step(batch, b, precision.compute_dtype);
    if (!prediction.defined())
      throw Error(PL_ERR_INVALID_ARGUMENT, "predict_step returned an undefined tensor for batch " + std::to_string(b) +
                                               "; return its prediction");
    // A layer that reuses its activation buffers (nn::Linear does while the shape stays) would
    // overwrite this prediction at the next batch: one still held elsewhere is copied.
    if (prediction.use_count() > 1) prediction = prediction.clone();
    out.push_back(prediction);
    progress_step(b + 1);
    each_callback("on_predict_batch_end", [&](Callback& c) { c.on_predict_batch_end(*self, m, prediction, batch, b); });
  }
  each_callback("on_predict_epoch_end", [&](Callback& c) { c.on_predict_epoch_end(*self, m); });
  m.on_predict_epoch_end();
  progress_end();
  each_callback("on_predict_end", [&](Callback& c) { c.on_predict_end(*self, m); });
  return out;
}

}  // namespace pl
