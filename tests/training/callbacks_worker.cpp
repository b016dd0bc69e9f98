// A rank under plrun (ddp, cpu) fitting with EarlyStopping or ModelCheckpoint, its monitored
// "val_loss" a script per rank and epoch (value_of below), so that the ranks' own values disagree.
//   callbacks_worker early <out_dir>     EarlyStopping(patience 2) on each rank's own value
//   callbacks_worker topk <out_dir>      ModelCheckpoint(top 2) on the ranks' mean (sync_dist)
//   callbacks_worker topk_local <out_dir> the same on each rank's own value (rank 0's decides)
//   callbacks_worker stop_rank1 <out_dir> rank 1 alone sets Trainer::should_stop inside epoch 1
//   callbacks_worker predict <out_dir>   fit 2 epochs, then Trainer::predict over 10 rows whose
//                                        first feature is their index
// Each rank writes <out_dir>/rank<r>.json: the epochs trained, EarlyStopping's stopped_epoch,
// ModelCheckpoint's best_model_path and best_k_models; predict: the rows it predicted ("rows"),
// its predictions ("predicted") and its model's outputs for all 10 rows ("all").
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/early_stopping.hpp>
#include <plrt/sdk/model_checkpoint.hpp>
#include <plrt/sdk/nn.hpp>
#include <plrt/sdk/trainer.hpp>
#include <thread>

namespace {

// early: rank 1 stops improving after epoch 1 (with patience 2 it would stop after epoch 3); the
// other ranks keep improving.  topk: multiples of 1/8, so the ranks' means are exact.
double value_of(const std::string& mode, int rank, int64_t epoch) {
  const auto e = static_cast<size_t>(epoch);
  if (mode == "early") {
    static const std::vector<double> better{1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1};
    static const std::vector<double> stalls{1.0, 0.9, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0, 1.1, 1.2};
    return (rank == 1 ? stalls : better).at(e);
  }
  static const std::vector<std::vector<double>> v{{0.5, 0.125, 0.375, 0.25, 0.75}, {0.25, 0.875, 0.125, 0.0, 0.25}};
  return v.at(static_cast<size_t>(rank) % 2).at(e);
}

struct Model : pl::LightningModule {
  pl::Generator gen{3};
  pl::nn::Linear fc{4, 3, true, &gen};
  std::string mode;
  explicit Model(std::string m) : mode(std::move(m)) { register_module("fc", fc); }
  pl::Scalar training_step(const pl::Batch& b, int64_t) override {
    // stop_rank1: slow steps, so that the ranks' agreement (about every 100 ms) runs inside an epoch
    if (mode == "stop_rank1") std::this_thread::sleep_for(std::chrono::milliseconds(40));
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1));
    fc.backward(ce.grad, false);
    return ce.loss;
  }
  void validation_step(const pl::Batch&, int64_t) override {
    pl::LogOptions o;
    o.sync_dist = mode == "topk";
    log("val_loss", value_of(mode, global_rank(), current_epoch()), o);
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    return std::make_unique<pl::SGD>(parameters(), pl::SgdOptions{});
  }
  pl::Tensor predict_step(const pl::Batch& b, int64_t) override { return fc.forward(b.at(0)); }
};

std::shared_ptr<pl::TensorDataset> dataset(int64_t n) {
  std::vector<float> xs(static_cast<size_t>(n) * 4);
  std::vector<int64_t> ys(static_cast<size_t>(n));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) * 0.1f;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>(i % 3);
  return std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{pl::Tensor::from_vector(xs, {n, 4}), pl::Tensor::from_vector(ys, {n})});
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 3)
      throw std::runtime_error("usage: callbacks_worker early|topk|topk_local|stop_rank1|predict <out_dir>");
    const std::string mode = argv[1], out = argv[2];
    pl::TrainerOptions o;
    o.strategy = "ddp";
    o.accelerator = "cpu";
    o.default_root_dir = out;
    std::shared_ptr<pl::EarlyStopping> es;
    std::shared_ptr<pl::ModelCheckpoint> mc;
    // stop_rank1: rank 1 alone sets should_stop inside epoch 1; every rank must stop with it
    struct StopOnRankOne : pl::Callback {
      void on_train_batch_end(pl::Trainer& t, pl::LightningBase&, const pl::Scalar&, const pl::Batch&,
                              int64_t) override {
        if (t.global_rank() == 1 && t.global_step() == 3) t.set_should_stop(true);
      }
    };
    if (mode == "predict") {
      o.max_epochs = 2;
      o.num_sanity_val_steps = 0;
    } else if (mode == "stop_rank1") {
      o.callbacks = {std::make_shared<StopOnRankOne>()};
      o.max_epochs = 10;
    } else if (mode == "early") {
      pl::EarlyStoppingOptions eo;
      eo.monitor = "val_loss";
      eo.patience = 2;
      es = std::make_shared<pl::EarlyStopping>(eo);
      o.callbacks = {es};
      o.max_epochs = 10;
    } else {
      pl::ModelCheckpointOptions co;
      co.monitor = "val_loss";
      co.save_top_k = 2;
      co.filename = "{epoch}-{val_loss:.3f}";
      mc = std::make_shared<pl::ModelCheckpoint>(co);
      o.callbacks = {mc};
      o.max_epochs = 5;
    }
    pl::Trainer trainer(o);
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    lo.shuffle = false;
    const int64_t world = trainer.world_size();
    const int64_t per_rank = mode == "stop_rank1" ? 32 : 8;  // 8 or 2 batches per epoch
    pl::DataLoader train(dataset(per_rank * world), lo), val(dataset(4 * world), lo);
    Model m(mode);
    trainer.fit(m, train, mode == "predict" ? nullptr : &val);
    nlohmann::json j;
    j["epochs"] = trainer.current_epoch();
    j["should_stop"] = trainer.should_stop();
    j["global_step"] = trainer.global_step();
    if (es) j["stopped_epoch"] = es->stopped_epoch(), j["reason"] = es->stop_reason();
    if (mc) {
      j["best_model_path"] = mc->best_model_path();
      j["best_k_models"] = mc->best_k_models();
    }
    if (mode == "predict") {
      std::vector<float> xs(40, 0.25f);
      for (size_t i = 0; i < 10; ++i) xs[i * 4] = static_cast<float>(i);
      const pl::Tensor x = pl::Tensor::from_vector(xs, {10, 4});
      auto rows = std::make_shared<pl::TensorDataset>(std::vector<pl::Tensor>{x});
      pl::DataLoaderOptions po;
      po.batch_size = 2;
      pl::DataLoader loader(rows, po);
      for (const pl::Tensor& p : trainer.predict(m, loader)) {
        for (float v : p.to_vector<float>()) j["predicted"].push_back(v);
      }
      for (int64_t b = 0; b < loader.num_batches(); ++b) {
        const auto first = loader.batch(b).at(0).to_vector<float>();
        for (size_t i = 0; i < first.size(); i += 4) j["rows"].push_back(static_cast<int>(first[i]));
      }
      m.eval();
      j["all"] = m.fc.forward(x).to_vector<float>();
    }
    std::ofstream(out + "/rank" + std::to_string(trainer.global_rank()) + ".json") << j.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "callbacks_worker: " << e.what() << "\n";
    return 1;
  }
}
