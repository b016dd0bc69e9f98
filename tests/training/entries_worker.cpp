// A rank of a job (under plrun) that exercises the trainer's ABI 1.4 strategy entries across
// processes; each rank writes what it saw to <out>.rank<r> as JSON for test_strategy_entries.
//   entries_worker <mode> <out> <root dir> <strategy> [<checkpoint to resume from>]
// modes:
//   gather  one epoch; training_step logs rank+1 with sync_dist (reduce_fx sum) and all_gathers it
//   skip    16-mixed; rank 1 writes an inf gradient at batch 1: every rank must skip that step
//           (ddp: an inf input instead, as its gradient copy-out would overwrite a written one)
//   fit     two epochs with checkpoints (and resumes from the checkpoint when one is given)
//   failsave  like fit, but rank 1's strategy cannot save its state in the second epoch
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "entries_model.hpp"

namespace {

double stat_or(const pl::Trainer& t, const std::string& name) {
  try {
    return t.strategy_stat(name);
  } catch (const pl::Error&) {
    return -1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: entries_worker gather|skip|fit <out> <root dir> <strategy> [<checkpoint>]\n";
    return 2;
  }
  const std::string mode = argv[1], out = argv[2], root = argv[3], strategy = argv[4];
  const std::string ckpt = argc > 5 ? argv[5] : "";
  nlohmann::json j;
  int rank = -1;
  try {
    pl::TrainerOptions o;
    o.strategy = strategy;
    o.accelerator = "cpu";
    o.default_root_dir = root;
    o.seed = 11;
    o.enable_progress_bar = false;
    o.enable_checkpointing = mode == "fit" || mode == "failsave";
    o.max_epochs = o.enable_checkpointing ? 2 : 1;
    if (mode == "failsave") o.strategy_options = {{"fail_save_rank", "1"}, {"fail_save_after", "4"}};
    if (mode == "skip") o.precision = "16-mixed";
    pl::Trainer trainer(o);
    rank = trainer.global_rank();
    j["log_dir"] = trainer.log_dir();
    entries_test::ModelConfig c;
    c.gather = mode == "gather";
    if (mode == "skip") c.inf_rank = 1, c.inf_batch = 1, c.inf_in_input = strategy == "ddp";
    entries_test::Model model(c);
    pl::DataLoader train = entries_test::loader(48, 6);
    trainer.fit(model, train, nullptr, ckpt);
    j["world_size"] = trainer.world_size();
    j["global_step"] = trainer.global_step();
    j["skipped_steps"] = trainer.skipped_steps();
    j["loss_scale"] = trainer.loss_scale();
    j["callback_metrics"] = trainer.callback_metrics();
    j["gathered"] = model.gathered;
    j["l2_weight"] = model.l2().weight().value.to_vector<float>();
    j["log_dir"] = trainer.log_dir();
    for (const char* s :
         {"reduce_calls", "all_gather_calls", "restored", "run_steps", "optimizer_steps", "agree_skip_calls", "skips"})
      j["stats"][s] = stat_or(trainer, s);
  } catch (const std::exception& e) {
    j["error"] = e.what();
    std::cerr << "entries_worker: " << e.what() << "\n";
  }
  if (rank < 0) rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  std::ofstream(out + ".rank" + std::to_string(rank)) << j.dump(2) << "\n";
  return j.contains("error") ? 1 : 0;
}
