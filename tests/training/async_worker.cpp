// A rank of a bagua async job for test_bagua.cpp, through pl::Trainer (which calls the ABI 1.6
// sync_weights before validation, before a checkpoint and at the end of fit).  Trains
// entries_test::Model with strategy bagua_async, each training step 2 ms longer (so that rounds
// happen between steps), and writes what it ended with to <out>.rank<r> as JSON.
//   async_worker fit <out> <root dir> <sync_interval_ms>        2 epochs, validation and a
//                                                               checkpoint after each
//   async_worker fit-noval <out> <root dir> <sync_interval_ms>  2 epochs, nothing but training
//   async_worker die <out> <root dir> <sync_interval_ms>        trains "forever" (epochs of 10 s);
//       the last rank kills itself (SIGKILL) at its 300th step (after rounds); the others must
//       fail: they write {"error": ...} and exit 1 (exit 0 would mean they never noticed)
// Launched by plrun, or (die) directly as a torchrun-style job whose store the test serves.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "entries_model.hpp"

namespace {

struct Slow : entries_test::Model {
  bool die = false;
  int64_t steps = 0;
  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (die && ++steps == 300 && global_rank() == world_size() - 1) {
      std::cout << "async_worker: rank " << global_rank() << " kills itself" << std::endl;
      std::raise(SIGKILL);
    }
    return entries_test::Model::training_step(batch, batch_idx);
  }
  void validation_step(const pl::Batch& batch, int64_t batch_idx) override {
    (void)batch_idx;
    pl::Tensor h = relu_.forward(l1().forward(batch.at(0)));
    auto ce = pl::nn::cross_entropy(l2().forward(h), batch.at(1), false);
    pl::LogOptions o;
    o.sync_dist = true;
    log("val_loss", ce.loss, o);
  }
  pl::nn::ReLU relu_;
};

nlohmann::json weights(Slow& m) {
  nlohmann::json j;
  for (auto& [name, p] : m.named_parameters()) j[name] = p->value.to_vector<float>();
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: async_worker fit|fit-noval|die <out> <root dir> <sync_interval_ms>\n";
    return 2;
  }
  const std::string mode = argv[1], out = argv[2], root = argv[3], interval = argv[4];
  nlohmann::json j;
  int rank = -1;
  Slow model;
  model.die = mode == "die";
  try {
    pl::TrainerOptions o;
    o.strategy = "bagua_async";
    o.strategy_options = {{"sync_interval_ms", interval}};
    o.accelerator = "cpu";
    o.default_root_dir = root;
    o.seed = 11;
    o.enable_progress_bar = false;
    o.enable_checkpointing = mode == "fit";
    o.max_epochs = model.die ? 1000 : 2;
    if (const char* n = std::getenv("LOCAL_WORLD_SIZE")) o.devices = std::atoi(n);  // started without plrun
    pl::Trainer trainer(o);
    rank = trainer.global_rank();
    // die: epochs of 4000 steps a rank (10 s), so that the epoch's end (a metrics collective)
    // cannot be what notices the death
    pl::DataLoader train = entries_test::loader(model.die ? 48000 : 96, 4), val = entries_test::loader(24, 4);
    trainer.fit(model, train, mode == "fit" ? &val : nullptr);
    j["global_step"] = trainer.global_step();
    j["weights"] = weights(model);
    for (const char* s : {"async_rounds", "async_syncs", "optimizer_steps"}) j["stats"][s] = trainer.strategy_stat(s);
  } catch (const std::exception& e) {
    j["error"] = e.what();
    std::cerr << "async_worker: rank " << rank << ": " << e.what() << std::endl;
  }
  if (rank < 0) return 3;
  std::ofstream(out + ".rank" + std::to_string(rank)) << j.dump(2) << "\n";
  return j.contains("error") ? 1 : 0;
}
