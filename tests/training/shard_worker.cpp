// A rank of a job (under plrun) for the sharded-checkpoint tests (test_sharded_checkpoint.cpp):
// trains entries_test::Model with Adam or SGD (momentum) for some epochs with a checkpoint after
// each, optionally resuming, and writes what it ended with to <out>.rank<r> as JSON.
//   shard_worker <out> <root dir> <strategy> <epochs> adam|sgd [<checkpoint> | - [<kill>]]
// Every rank sees the whole dataset in the same order (use_distributed_sampler off), so the run's
// trajectory is the same at every world size and with every strategy (the gradients' average is
// each rank's own): runs at different world sizes can be compared.  The strategy's options come
// from plrun (--strategy-option).  <kill>: a worker kills itself (SIGKILL) in the middle of the
// second epoch's checkpoint save, after the first epoch's was committed (6 steps an epoch):
//   kill          sharded_c's test options: rank 1, inside its save_state (after its shard)
//   kill-rank1    any strategy: rank 1 when the trainer reads its optimizer's scalars for its
//                 shard's metadata (rank 0 has made the staging folder; rank 1's shard is unwritten)
//   kill-rank0    any strategy: rank 0 when it next asks the optimizer's name after every rank's
//                 shard is in the staging folder (every rank has reported; nothing is committed)
// The hooks are a user's Optimizer subclass (virtual state_scalars and name), not an option of the
// strategy.  Before dying the worker writes <out>.killed: the staging folder and its files then.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "entries_model.hpp"

namespace {

namespace fs = std::filesystem;

enum class Kill {
  none,
  strategy_option,
  rank1,
  rank0
};

struct Globals {
  std::string out, root;
  Kill kill = Kill::none;
  int rank = -1;
  int64_t steps_run = 0;  // training steps run by this process (a resumed run runs fewer)
};
Globals g;

constexpr int64_t kStepsPerEpoch = 6;

// The checkpoint's staging folder ("<root>/lightning_logs/version_<n>/checkpoints/last.tmp-<pid>")
// while a save is under way, else "".
std::string staging_folder() {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(g.root, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory() && it->path().filename().string().rfind("last.tmp-", 0) == 0) return it->path().string();
  return "";
}

std::vector<std::string> files_of(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

[[noreturn]] void die(const std::string& staging) {
  nlohmann::json j{{"rank", g.rank}, {"steps_run", g.steps_run}, {"staging", staging}, {"files", files_of(staging)}};
  std::ofstream(g.out + ".killed") << j.dump(2) << "\n";
  std::raise(SIGKILL);
  std::abort();
}

// Kills this worker at the point of the second epoch's save that g.kill names.
template <class Base>
class Killing : public Base {
 public:
  using Base::Base;
  std::map<std::string, double> state_scalars() const override {
    // Read by the trainer for this rank's optimizer file, once the staging folder is known.
    if (g.kill == Kill::rank1 && g.rank == 1 && g.steps_run == 2 * kStepsPerEpoch) die(staging_folder());
    return Base::state_scalars();
  }
  std::string name() const override {
    if (g.kill == Kill::rank0 && g.rank == 0 && g.steps_run == 2 * kStepsPerEpoch) {
      const std::string staging = staging_folder();
      const std::vector<std::string> files = files_of(staging);
      auto has = [&](const std::string& f) { return std::find(files.begin(), files.end(), f) != files.end(); };
      if (!staging.empty() && has("optimizer.rank0.safetensors") && has("optimizer.rank1.safetensors")) die(staging);
    }
    return Base::name();
  }
};

class Model : public entries_test::Model {
 public:
  explicit Model(bool adam) : adam_(adam) {}
  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx) override {
    ++g.steps_run;
    return entries_test::Model::training_step(batch, batch_idx);
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    if (adam_) return std::make_unique<Killing<pl::Adam>>(parameters(), pl::AdamOptions{0.02, 0.9, 0.99, 1e-8, 0.01});
    pl::SgdOptions o;  // entries_test::Model's
    o.lr = 0.1;
    o.momentum = 0.9;
    return std::make_unique<Killing<pl::SGD>>(parameters(), o);
  }

 private:
  bool adam_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: shard_worker <out> <root dir> <strategy> <epochs> adam|sgd "
                 "[<checkpoint>|- [kill|kill-rank1|kill-rank0]]\n";
    return 2;
  }
  const std::string strategy = argv[3], optimizer = argv[5];
  g.out = argv[1];
  g.root = argv[2];
  const int64_t epochs = std::atoll(argv[4]);
  const std::string ckpt = argc > 6 && std::string(argv[6]) != "-" ? argv[6] : "";
  const std::string kill = argc > 7 ? argv[7] : "";
  if (!kill.empty() && kill != "kill" && kill != "kill-rank1" && kill != "kill-rank0") {
    std::cerr << "shard_worker: kill mode '" << kill << "' is not valid (kill, kill-rank1, kill-rank0)\n";
    return 2;
  }
  g.kill = kill == "kill"         ? Kill::strategy_option
           : kill == "kill-rank1" ? Kill::rank1
           : kill == "kill-rank0" ? Kill::rank0
                                  : Kill::none;
  nlohmann::json j;
  try {
    pl::TrainerOptions o;
    o.strategy = strategy;
    o.accelerator = "cpu";
    o.default_root_dir = g.root;
    o.seed = 3;
    o.enable_progress_bar = false;
    o.max_epochs = epochs;
    o.use_distributed_sampler = false;
    if (g.kill == Kill::strategy_option)
      o.strategy_options = {{"kill_save_rank", "1"}, {"kill_save_after", std::to_string(kStepsPerEpoch)}};
    pl::Trainer trainer(o);
    g.rank = trainer.global_rank();
    Model model(optimizer == "adam");
    pl::DataLoader train = entries_test::loader(36, 6);
    trainer.fit(model, train, nullptr, ckpt);
    j["world_size"] = trainer.world_size();
    j["global_step"] = trainer.global_step();
    j["steps_run"] = g.steps_run;
    j["log_dir"] = trainer.log_dir();
    for (auto& [name, p] : model.named_parameters()) j["weights"][name] = p->value.to_vector<float>();
    for (const char* s : {"optimizer_steps", "owned_elements", "owned_param_bytes", "restored", "stage"}) {
      try {
        j["stats"][s] = trainer.strategy_stat(s);
      } catch (const pl::Error&) {
      }
    }
  } catch (const std::exception& e) {
    j["error"] = e.what();
    std::cerr << "shard_worker: " << e.what() << "\n";
  }
  if (g.rank < 0) g.rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  std::ofstream(g.out + ".rank" + std::to_string(g.rank)) << j.dump(2) << "\n";
  return j.contains("error") ? 1 : 0;
}
