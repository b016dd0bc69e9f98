// A rank of a job (under plrun) for the sharded-checkpoint tests (test_sharded_checkpoint.cpp):
// trains entries_test::Model with Adam or SGD (momentum) for some epochs with a checkpoint after
// each, optionally resuming, and writes what it ended with to <out>.rank<r> as JSON.
//   shard_worker <out> <root dir> <strategy> <epochs> adam|sgd [<checkpoint> | - [kill]]
// Every rank sees the whole dataset in the same order (use_distributed_sampler off), so the run's
// trajectory is the same at every world size and with every strategy (the gradients' average is
// each rank's own): runs at different world sizes can be compared.  "kill": sharded_c kills rank 1
// inside its save_state at the second epoch's checkpoint (after the first epoch's was committed).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "entries_model.hpp"

namespace {

class Model : public entries_test::Model {
 public:
  explicit Model(bool adam) : adam_(adam) {}
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    if (!adam_) return entries_test::Model::configure_optimizers();  // SGD, momentum 0.9
    return std::make_unique<pl::Adam>(parameters(), pl::AdamOptions{0.02, 0.9, 0.99, 1e-8, 0.01});
  }

 private:
  bool adam_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: shard_worker <out> <root dir> <strategy> <epochs> adam|sgd [<checkpoint>|- [kill]]\n";
    return 2;
  }
  const std::string out = argv[1], root = argv[2], strategy = argv[3], optimizer = argv[5];
  const int64_t epochs = std::atoll(argv[4]);
  const std::string ckpt = argc > 6 && std::string(argv[6]) != "-" ? argv[6] : "";
  const bool kill = argc > 7 && std::string(argv[7]) == "kill";
  nlohmann::json j;
  int rank = -1;
  try {
    pl::TrainerOptions o;
    o.strategy = strategy;
    o.accelerator = "cpu";
    o.default_root_dir = root;
    o.seed = 3;
    o.enable_progress = false;
    o.max_epochs = epochs;
    o.use_distributed_sampler = false;
    if (kill) o.strategy_options = {{"kill_save_rank", "1"}, {"kill_save_after", "6"}};  // 6 steps an epoch
    pl::Trainer trainer(o);
    rank = trainer.global_rank();
    Model model(optimizer == "adam");
    pl::DataLoader train = entries_test::loader(36, 6);
    trainer.fit(model, train, nullptr, ckpt);
    j["world_size"] = trainer.world_size();
    j["global_step"] = trainer.global_step();
    j["log_dir"] = trainer.log_dir();
    for (auto& [name, p] : model.named_parameters()) j["weights"][name] = p->value.to_vector<float>();
    for (const char* s : {"optimizer_steps", "owned_elements", "restored"}) {
      try {
        j["stats"][s] = trainer.strategy_stat(s);
      } catch (const pl::Error&) {
      }
    }
  } catch (const std::exception& e) {
    j["error"] = e.what();
    std::cerr << "shard_worker: " << e.what() << "\n";
  }
  if (rank < 0) rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  std::ofstream(out + ".rank" + std::to_string(rank)) << j.dump(2) << "\n";
  return j.contains("error") ? 1 : 0;
}
