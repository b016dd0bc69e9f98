// A rank of a job (under plrun) for the elastic-resume tests (test_elastic_resume.cpp): trains
// entries_test::Model on a shuffled dataset whose third field is each row's index, and records
// which rows every training step got, so that a test can check that a run resumed at another world
// size trains every sample of the epoch exactly once.
//   elastic_worker <out dir> <root dir> <samples> <batch> <epochs> <max steps> <ckpt | ->
// Each process appends "epoch index" lines to <out>/fetched.<pid>.txt (one per sample of every
// training step); rank 0 writes <out>/result.json: samples_trained, global_step, epoch, world_size,
// resumed_from, log_dir.  The strategy and device count come from plrun; PL_RESTART_COUNT and
// PL_TRAINER_CHECKPOINT_EVERY_* from the environment.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "entries_model.hpp"

namespace {

class Recording : public entries_test::Model {
 public:
  explicit Recording(std::string path) : out_(std::move(path), std::ios::app) {}
  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx) override {
    for (int64_t i : batch.at(2).to_vector<int64_t>()) out_ << current_epoch() << " " << i << "\n";
    out_.flush();
    return entries_test::Model::training_step(batch, batch_idx);
  }

 private:
  std::ofstream out_;
};

std::shared_ptr<pl::TensorDataset> indexed(int64_t n) {
  auto base = entries_test::dataset(n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{base->fields()[0], base->fields()[1], pl::Tensor::from_vector(idx, {n})});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: elastic_worker <out> <root> <samples> <batch> <epochs> <max steps> <ckpt | ->\n";
    return 2;
  }
  const std::string out = argv[1], ckpt = std::string(argv[7]) == "-" ? "" : argv[7];
  try {
    pl::TrainerOptions o;
    o.accelerator = "cpu";
    o.default_root_dir = argv[2];
    o.max_epochs = std::stoll(argv[5]);
    o.max_steps = std::stoll(argv[6]);
    o.seed = 3;
    o.enable_progress_bar = false;
    pl::Trainer trainer(o);
    Recording model(out + "/fetched." + std::to_string(getpid()) + ".txt");
    pl::DataLoaderOptions lo;
    lo.batch_size = std::stoll(argv[4]);
    lo.shuffle = true;
    pl::DataLoader train(indexed(std::stoll(argv[3])), lo);
    trainer.fit(model, train, nullptr, ckpt);
    if (trainer.is_global_zero()) {
      nlohmann::json j;
      j["samples_trained"] = trainer.samples_trained();
      j["global_step"] = trainer.global_step();
      j["epoch"] = trainer.current_epoch();
      j["world_size"] = trainer.world_size();
      j["resumed_from"] = trainer.resumed_from();
      j["log_dir"] = trainer.log_dir();
      std::ofstream(out + "/result.json") << j.dump(2) << "\n";
    }
    return 0;
  } catch (const pl::Error& e) {
    std::cerr << "elastic_worker: " << e.what() << "\n";
    return e.code() == PL_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
}
