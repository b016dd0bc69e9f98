// Checkpoints: a folder written in one step (AtomicDir) holding
//   model.safetensors      the module's state_dict under PyTorch names (loads in PyTorch as is)
//   optimizer.safetensors  the optimizer's state tensors; its scalars in the metadata
//   trainer.json           epoch, batches done in it, global step, world size, every rank's RNG
//                          states, metrics, precision, the 16-mixed loss scaler's state and the
//                          strategy's state_info
//   strategy.*.rank<r>.*   the strategy's own state (ABI 1.4 save_state), when it has some
// Every rank calls save (the RNG states are gathered); rank 0 writes its files.  A strategy with
// state: rank 0 makes the staging folder and tells every rank its path, every rank calls
// save_state into it, every rank reports its outcome (the barrier), and rank 0 commits only when
// all succeeded; a failed or dead rank leaves the previous checkpoint whole (the staging folder
// is removed).  Every rank loads the same folder (a shared file system across nodes); the
// strategy's load_state runs before any of the trainer's state changes.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/safetensors.hpp>

#include "trainer_impl.hpp"

namespace pl {

namespace {

constexpr const char* kFormat = "plrt-checkpoint";
constexpr int kVersion = 1;

std::string g17(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void Trainer::Impl::save_checkpoint(const std::string& path) {
  if (!prepared || module == nullptr || !optimizer)
    throw Error(PL_ERR_INVALID_ARGUMENT, "save_checkpoint: nothing to save yet (call it during or after fit)");
  // Each rank's generators, so that a resumed run draws the same numbers on every rank.
  std::string mine = global_generator().state() + '\x1f' + rank_generator().state();
  plrt::sdk::Collectives c = collectives();
  std::vector<std::string> states = c.allgather(mine);
  const PL_StrategyStateInfo sinfo = strategy.state_info();
  const bool strategy_files = sinfo.has_state != 0;
  if (strategy_files && world > 1 && c.world_size() == 1)
    throw Error(PL_ERR_UNSUPPORTED, "save_checkpoint: strategy '" + job.strategy +
                                        "' keeps state of its own but has "
                                        "neither a process group nor all_gather, so its " +
                                        std::to_string(world) +
                                        " ranks cannot be told the checkpoint's staging folder");
  if (rank != 0 && !strategy_files) return;

  std::unique_ptr<AtomicDir> dir;
  if (rank == 0) {
    std::string error;  // rank 0's failure to make the staging folder, told to every rank
    try {
      if (path.empty()) throw Error(PL_ERR_INVALID_ARGUMENT, "save_checkpoint: the path is empty");
      std::error_code ec;
      auto parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      if (ec)
        throw Error(PL_ERR_RUNTIME, "cannot create the checkpoint folder " + parent.string() + ": " + ec.message());
      clean_atomic_leftovers(path);
      dir = std::make_unique<AtomicDir>(path);
    } catch (const std::exception& e) {
      if (!strategy_files) throw;
      error = e.what();
    }
    if (strategy_files) c.allgather(dir ? "ok\n" + dir->temp_path() : "error\n" + error);
    if (!dir) throw Error(PL_ERR_RUNTIME, error);
  }
  if (strategy_files) {
    std::string staging;
    if (rank != 0) {
      const std::string told = c.allgather("").at(0);
      if (told.compare(0, 3, "ok\n") != 0)
        throw Error(PL_ERR_RUNTIME, "save_checkpoint: rank 0 could not make the checkpoint folder: " + told.substr(6));
      staging = told.substr(3);
    } else {
      staging = dir->temp_path();
    }
    std::string failure;
    try {
      strategy.save_state(staging);
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "failed";
    }
    const std::vector<std::string> outcomes = c.allgather(failure);  // the barrier: every rank has written
    for (size_t r = 0; r < outcomes.size(); ++r)
      if (!outcomes[r].empty())
        throw Error(PL_ERR_RUNTIME, "save_checkpoint: rank " + std::to_string(r) + " could not save strategy '" +
                                        job.strategy + "''s state (" + outcomes[r] +
                                        "); the previous checkpoint is kept");
    if (rank != 0) return;
  }

  std::map<std::string, std::string> opt_meta{{"optimizer", optimizer->name()}};
  for (const auto& [k, v] : optimizer->state_scalars()) opt_meta[k] = g17(v);

  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["epoch"] = epoch;
  j["batches_done"] = resume_batches;
  j["global_step"] = step;
  j["world_size"] = world;
  j["strategy"] = job.strategy;
  j["optimizer"] = optimizer->name();
  j["rng"] = nlohmann::json::array();
  for (const auto& s : states) {
    auto sep = s.find('\x1f');
    j["rng"].push_back({{"global", s.substr(0, sep)}, {"rank", sep == std::string::npos ? "" : s.substr(sep + 1)}});
  }
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [k, v] : callback) metrics[k] = v;
  j["callback_metrics"] = metrics;
  j["precision"] = precision.name;
  if (scaler) j["grad_scaler"] = {{"scale", scaler->scale()}, {"growth_tracker", scaler->growth_tracker()}};
  j["strategy_state"] = {{"has_state", sinfo.has_state != 0}, {"any_world_size", sinfo.any_world_size != 0}};

  dir->write("model.safetensors", safetensors::serialize(module->state_dict(), {{"format", "pt"}}));
  dir->write("optimizer.safetensors", safetensors::serialize(optimizer->state_tensors(), opt_meta));
  dir->write("trainer.json", j.dump(2) + "\n");
  dir->commit();
  rt->log(PL_LOG_DEBUG, "checkpoint saved: " + path);
}

void Trainer::Impl::load_checkpoint(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path + "/trainer.json"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + "/trainer.json is not valid JSON: " + e.what());
  }
  if (j.value("format", "") != kFormat || j.value("version", 0) != kVersion)
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + " is not a " + kFormat + " version " +
                                             std::to_string(kVersion) + " folder (trainer.json says format '" +
                                             j.value("format", "") + "', version " +
                                             std::to_string(j.value("version", 0)) + ")");
  auto model = safetensors::load(path + "/model.safetensors");
  auto opt = safetensors::load(path + "/optimizer.safetensors");
  std::string saved_opt = opt.metadata.count("optimizer") ? opt.metadata.at("optimizer") : "";
  if (saved_opt != optimizer->name())
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + " holds " + (saved_opt.empty() ? "no" : saved_opt) +
                                             " optimizer state but configure_optimizers made " + optimizer->name());
  // The strategy's state first: its errors (a missing or damaged file, a world size it cannot
  // load from) come before any of the trainer's state changes.
  const bool saved_state = j.contains("strategy_state") && j["strategy_state"].value("has_state", false);
  const PL_StrategyStateInfo sinfo = strategy.state_info();
  int saved_world_size = 0;
  try {
    saved_world_size = j.at("world_size").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "checkpoint " + path + "/trainer.json lacks a field or has a wrong type: " + e.what());
  }
  if (saved_state && sinfo.has_state) {
    strategy.load_state(path, saved_world_size);
  } else if (saved_state && rank == 0) {
    warn("checkpoint " + path + " holds state of strategy '" + j.value("strategy", std::string("?")) +
         "', which strategy '" + job.strategy + "' does not read");
  } else if (sinfo.has_state && rank == 0) {
    warn("checkpoint " + path + " holds no strategy state: strategy '" + job.strategy + "' starts its own afresh");
  }
  module->load_state_dict(model.tensors, true);
  std::map<std::string, double> scalars;
  for (const auto& [k, v] : opt.metadata)
    if (k != "optimizer") scalars[k] = std::strtod(v.c_str(), nullptr);
  std::map<std::string, Tensor> tensors;
  for (auto& [k, t] : opt.tensors) tensors[k] = t.to(acc, device);
  optimizer->load_state(tensors, scalars);

  try {
    epoch = j.at("epoch").get<int64_t>();
    resume_batches = j.at("batches_done").get<int64_t>();
    step = j.at("global_step").get<int64_t>();
    const auto& rng = j.at("rng");
    int saved_world = j.at("world_size").get<int>();
    if (saved_world == world && rng.size() == static_cast<size_t>(world)) {
      global_generator().set_state(rng[static_cast<size_t>(rank)].at("global").get<std::string>());
      rank_generator().set_state(rng[static_cast<size_t>(rank)].at("rank").get<std::string>());
    } else {
      global_generator().set_state(rng.at(0).at("global").get<std::string>());
      if (rank == 0)
        warn("checkpoint " + path + " was saved by " + std::to_string(saved_world) + " processes, this run has " +
             std::to_string(world) + ": per-rank random streams restart from the seed");
    }
    for (auto& [k, v] : j.at("callback_metrics").items()) callback[k] = v.get<double>();
    // The loss scale continues where it was (a 32-true or bf16 checkpoint starts at the default).
    if (scaler && j.contains("grad_scaler"))
      scaler->load(j.at("grad_scaler").at("scale").get<double>(),
                   j.at("grad_scaler").at("growth_tracker").get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "checkpoint " + path + "/trainer.json lacks a field or has a wrong type: " + e.what());
  }
  info("resumed from " + path + " at epoch " + std::to_string(epoch) + ", step " + std::to_string(step));
}

}  // namespace pl
