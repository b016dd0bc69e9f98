// Checkpoints: a folder written in one step (AtomicDir) holding
//   model.safetensors      the module's state_dict under PyTorch names (loads in PyTorch as is)
//   optimizer.safetensors  the optimizer's state tensors; its scalars in the metadata (rank 0's:
//                          every rank holds the same state unless the strategy shards it)
//   optimizer.rank<r>.safetensors  instead, when the strategy shards the optimizer state (ABI 1.5
//                          owned_ranges): each rank's own ranges' state, written by that rank; no
//                          rank ever gathers another's
//   trainer.json           epoch, where in it (samples_done: positions of the epoch's global order
//                          consumed, see DataLoader::position_after; batches_done: each rank's
//                          batches), global step, samples_trained, world size, the samples of
//                          one optimizer step (step_batch_size), every rank's RNG
//                          states, metrics, precision, the 16-mixed loss scaler's state, the
//                          strategy's state_info and which optimizer files there are
//                          ("optimizer_files": "single" or "per_rank", one per rank of world_size)
//   strategy.*.rank<r>.*   the strategy's own state (ABI 1.4 save_state), when it has some
// Every rank calls save (the RNG states are gathered); rank 0 writes the shared files.  Per-rank
// files (strategy state, sharded optimizer state): rank 0 makes the staging folder and tells every
// rank its path, every rank writes its files into it, every rank reports its outcome (the
// barrier), and rank 0 commits only when all succeeded; a failed or dead rank leaves the previous
// checkpoint whole (the staging folder is removed).  Every rank loads the same folder (a shared
// file system across nodes): the optimizer state is resharded to the ranges this rank keeps, from
// whichever files hold them (optimizer_shards.hpp), and every check comes before any state
// changes (the strategy's load_state first of the changes).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/safetensors.hpp>

#include "optimizer_shards.hpp"
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

// The optimizer file's metadata: its name and its scalars.
std::map<std::string, std::string> optimizer_metadata(const Optimizer& opt) {
  std::map<std::string, std::string> meta{{plrt::sdk::kOptimizerNameKey, opt.name()}};
  for (const auto& [k, v] : opt.state_scalars()) meta[k] = g17(v);
  return meta;
}

}  // namespace

void Trainer::Impl::save_checkpoint(const std::string& path) {
  if (!prepared || !model || !optimizer)
    throw Error(PL_ERR_INVALID_ARGUMENT, "save_checkpoint: nothing to save yet (call it during or after fit)");
  const plrt::sdk::Profiler::Span timed(&profiler, "save_checkpoint");
  strategy.sync_weights();  // ABI 1.6: one model is saved (bagua async's ranks drift apart)
  // Each rank's generators, so that a resumed run draws the same numbers on every rank.
  std::string mine = global_generator().state() + '\x1f' + rank_generator().state();
  plrt::sdk::Collectives c = collectives();
  std::vector<std::string> states = c.allgather(mine);
  const PL_StrategyStateInfo sinfo = strategy.state_info();
  const bool strategy_files = sinfo.has_state != 0;
  // ABI 1.6: every rank's optimizer state is its own (decentralized training): each rank writes
  // its whole state, as a sharded strategy's rank writes its shard.
  const bool local =
      !sharded && PL_HAS_FIELD(PL_StrategyStateInfo, &sinfo, local_optimizer_state) && sinfo.local_optimizer_state != 0;
  const bool per_rank = strategy_files || sharded || local;  // every rank writes files of its own
  if (per_rank && world > 1 && c.world_size() == 1)
    throw Error(PL_ERR_UNSUPPORTED, "save_checkpoint: strategy '" + job.strategy + "' keeps " +
                                        (sharded ? "sharded optimizer state" : "state of its own") +
                                        " but has neither a process group nor all_gather, so its " +
                                        std::to_string(world) +
                                        " ranks cannot be told the checkpoint's staging folder");
  if (rank != 0 && !per_rank) return;

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
      if (!per_rank) throw;
      error = e.what();
    }
    if (per_rank) c.allgather(dir ? "ok\n" + dir->temp_path() : "error\n" + error);
    if (!dir) throw Error(PL_ERR_RUNTIME, error);
  }
  if (per_rank) {
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
      if (sharded || local) {  // this rank's ranges' (or its own whole) state: no rank gathers another's
        std::map<std::string, std::string> meta = optimizer_metadata(*optimizer);
        meta[plrt::sdk::kShardRankKey] = std::to_string(rank);
        meta[plrt::sdk::kShardWorldKey] = std::to_string(world);
        write_file_atomic(staging + "/" + plrt::sdk::optimizer_rank_file(rank),
                          safetensors::serialize(optimizer->state_tensors(), meta));
      }
      if (strategy_files) strategy.save_state(staging);
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "failed";
    }
    const std::vector<std::string> outcomes = c.allgather(failure);  // the barrier: every rank has written
    const std::string state = "strategy '" + job.strategy + "''s state";
    const std::string mine = sharded ? "its optimizer shard" : "its optimizer state";
    const std::string what = !(sharded || local) ? state : strategy_files ? mine + " or " + state : mine;
    for (size_t r = 0; r < outcomes.size(); ++r)
      if (!outcomes[r].empty())
        throw Error(PL_ERR_RUNTIME, "save_checkpoint: rank " + std::to_string(r) + " could not save " + what + " (" +
                                        outcomes[r] + "); the previous checkpoint is kept");
    if (rank != 0) return;
  }

  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  // At an epoch's end (epoch_done: a monitoring callback saves), the next epoch's start.
  j["epoch"] = epoch_done ? epoch + 1 : epoch;
  j["batches_done"] = epoch_done ? 0 : epoch_batches;
  j["samples_done"] = epoch_done ? 0 : epoch_samples;
  j["global_step"] = step;
  j["samples_trained"] = samples_trained;
  j["world_size"] = world;
  j["step_batch_size"] = effective_batch * o.accumulate_grad_batches;
  j["strategy"] = job.strategy;
  j["optimizer"] = optimizer->name();
  j["rng"] = nlohmann::json::array();
  for (const auto& s : states) {
    auto sep = s.find('\x1f');
    j["rng"].push_back({{"global", s.substr(0, sep)}, {"rank", sep == std::string::npos ? "" : s.substr(sep + 1)}});
  }
  j["callback_metrics"] = numbers_to_json(settled());  // a NaN loss (a diverged run) is kept
  j["lr_schedulers"] = schedulers_state();
  j["callbacks"] = callbacks_state();
  j["precision"] = precision.name;
  if (scaler) j["grad_scaler"] = {{"scale", scaler->scale()}, {"growth_tracker", scaler->growth_tracker()}};
  j["strategy_state"] = {{"has_state", sinfo.has_state != 0}, {"any_world_size", sinfo.any_world_size != 0}};
  // per_rank: optimizer.rank<r> (r < world_size), shards; local: optimizer.rank<r>, each rank's whole state
  j["optimizer_files"] = sharded ? "per_rank" : local ? "local" : "single";

  dir->write("model.safetensors", safetensors::serialize(model->state_dict(), {{"format", "pt"}}));
  if (!sharded && !local)
    dir->write("optimizer.safetensors",
               safetensors::serialize(optimizer->state_tensors(), optimizer_metadata(*optimizer)));
  dir->write("trainer.json", j.dump(2) + "\n");
  dir->commit();
  rt->log(PL_LOG_DEBUG, "checkpoint saved: " + path + " (epoch " + std::to_string(epoch) + ", step " +
                            std::to_string(step) + ", samples_done " + std::to_string(epoch_samples) + ")");
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
  // Everything trainer.json says, read before anything changes.
  int64_t saved_epoch = 0, saved_batches = 0, saved_step = 0, saved_samples = -1, saved_trained = 0,
          saved_step_batch = 0;
  int saved_world = 0;
  std::string global_rng, rank_rng, layout;
  bool same_world = false, saved_state = false;
  std::map<std::string, double> saved_metrics;
  std::optional<std::pair<double, int64_t>> saved_scaler;
  nlohmann::json sched;      // the learning-rate schedules' states: restored once they are made
  nlohmann::json cb_states;  // the callbacks' states: restored once their setup ran
  try {
    saved_epoch = j.at("epoch").get<int64_t>();
    saved_batches = j.at("batches_done").get<int64_t>();
    saved_step = j.at("global_step").get<int64_t>();
    saved_world = j.at("world_size").get<int>();
    if (j.contains("samples_done")) {  // older checkpoints: absent
      saved_samples = j.at("samples_done").get<int64_t>();
      if (saved_samples < 0) saved_batches = -1;  // named below
    }
    saved_trained = j.value("samples_trained", int64_t{0});
    saved_step_batch = j.value("step_batch_size", int64_t{0});
    const auto& rng = j.at("rng");
    same_world = saved_world == world && rng.size() == static_cast<size_t>(world);
    const auto& mine = rng.at(same_world ? static_cast<size_t>(rank) : 0);
    global_rng = mine.at("global").get<std::string>();
    if (same_world) rank_rng = mine.at("rank").get<std::string>();
    saved_metrics =
        numbers_from_json(j.at("callback_metrics"), "checkpoint " + path + "/trainer.json callback_metrics");
    if (j.contains("grad_scaler"))
      saved_scaler.emplace(j.at("grad_scaler").at("scale").get<double>(),
                           j.at("grad_scaler").at("growth_tracker").get<int64_t>());
    saved_state = j.contains("strategy_state") && j.at("strategy_state").value("has_state", false);
    layout = j.value("optimizer_files", std::string("single"));  // older checkpoints: one file
    if (j.contains("callbacks")) {                               // older checkpoints: absent
      cb_states = j.at("callbacks");
      if (!cb_states.is_object())
        throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path +
                                                 "/trainer.json has \"callbacks\" that is not an "
                                                 "object (state_key -> state)");
    }
    if (j.contains("lr_schedulers")) {  // older checkpoints: absent (no schedule state to restore)
      sched = j.at("lr_schedulers");
      for (const auto& e : sched)
        (void)e.at("name").get<std::string>(), e.at("state").get<std::map<std::string, double>>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "checkpoint " + path + "/trainer.json lacks a field or has a wrong type: " + e.what());
  }
  if (layout != "single" && layout != "per_rank" && layout != "local")
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + "/trainer.json has optimizer_files '" + layout +
                                             "'; valid: single (optimizer.safetensors), per_rank "
                                             "(optimizer.rank<r>.safetensors for r < world_size), local (each "
                                             "rank's whole state in optimizer.rank<r>.safetensors)");
  if (saved_epoch < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + "/trainer.json has epoch " +
                                             std::to_string(saved_epoch) + "; valid: an epoch number >= 0");
  if (saved_batches < 0 || saved_step < 0 || saved_trained < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + "/trainer.json has a negative batches_done (" +
                                             std::to_string(j.value("batches_done", int64_t{0})) + "), samples_done (" +
                                             std::to_string(saved_samples) + "), global_step (" +
                                             std::to_string(saved_step) + ") or samples_trained (" +
                                             std::to_string(saved_trained) + ")");
  if (saved_world < 1)
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + path + "/trainer.json has world_size " +
                                             std::to_string(saved_world) + "; valid: the process count, >= 1");
  auto model = safetensors::load(path + "/model.safetensors");
  // The optimizer state this rank keeps.  One file and an optimizer that every rank holds whole:
  // as saved (a strategy's partial ranges included).  Otherwise (this rank keeps a shard, or the
  // checkpoint's state is in per-rank files): resharded to grad_ranges, one file at a time.
  // Each rank's own state (layout local): this rank's file at the same world size under a strategy
  // that keeps local state too, else rank 0's (every rank then holds the same state, as ddp needs).
  const PL_StrategyStateInfo sinfo = strategy.state_info();
  const bool local_now =
      PL_HAS_FIELD(PL_StrategyStateInfo, &sinfo, local_optimizer_state) && sinfo.local_optimizer_state != 0 && !sharded;
  const std::string own_file =
      layout != "local" ? "optimizer.safetensors" : plrt::sdk::optimizer_rank_file(same_world && local_now ? rank : 0);
  if (layout == "local" && !(same_world && local_now) && rank == 0)
    warn("checkpoint " + path + " holds each of its " + std::to_string(saved_world) +
         " ranks' own optimizer state; this run (" + std::to_string(world) + " ranks, strategy '" + job.strategy +
         "') keeps one state for all, so every rank resumes from rank 0's");
  plrt::sdk::OptimizerState opt;
  if (layout != "per_rank" && !sharded) {
    opt = plrt::sdk::read_optimizer_file(path, own_file, optimizer->name());
  } else {
    std::vector<std::string> files;
    if (layout != "per_rank") files.push_back(own_file);
    for (int r = 0; layout == "per_rank" && r < saved_world; ++r) files.push_back(plrt::sdk::optimizer_rank_file(r));
    std::vector<plrt::sdk::ShardParam> params;
    for (const Parameter* p : optimizer->params()) {
      auto it = param_index.find(p);
      params.push_back(
          {it == param_index.end() ? std::string() : param_names[it->second], p->value.shape(), p->value.dtype()});
    }
    opt = plrt::sdk::read_optimizer_files(path, files, optimizer->name(), std::move(params), grad_ranges);
  }

  // The strategy's state first of the changes: its errors (a missing or damaged file, a world
  // size it cannot load from) come before any of the trainer's state changes.
  if (saved_state && sinfo.has_state) {
    strategy.load_state(path, saved_world);
  } else if (saved_state && rank == 0) {
    warn("checkpoint " + path + " holds state of strategy '" + j.value("strategy", std::string("?")) +
         "', which strategy '" + job.strategy + "' does not read");
  } else if (sinfo.has_state && rank == 0) {
    warn("checkpoint " + path + " holds no strategy state: strategy '" + job.strategy + "' starts its own afresh");
  }
  this->model->load_state_dict(model.tensors, true);
  optimizer->load_state(opt.tensors, opt.scalars);  // copies onto the parameters' devices

  epoch = saved_epoch;
  epoch_batches = saved_batches;
  epoch_samples = std::max<int64_t>(saved_samples, 0);
  legacy_batches = saved_samples < 0 ? saved_batches : -1;  // resume_position converts it
  legacy_world = saved_world;
  step = saved_step;
  samples_trained = saved_trained;
  resumed_world = saved_world;
  resumed_step_batch = saved_step_batch;
  global_generator().set_state(global_rng);
  if (same_world) {
    rank_generator().set_state(rank_rng);
  } else if (rank == 0) {
    warn("checkpoint " + path + " was saved by " + std::to_string(saved_world) + " processes, this run has " +
         std::to_string(world) + ": per-rank random streams restart from the seed");
  }
  auto& settled_values = settled();
  for (const auto& [k, v] : saved_metrics) settled_values[k] = v;
  saved_schedulers = sched;
  saved_callbacks = cb_states;
  // The loss scale continues where it was (a 32-true or bf16 checkpoint starts at the default).
  if (scaler && saved_scaler) scaler->load(saved_scaler->first, saved_scaler->second);
  info("resumed from " + path + " at epoch " + std::to_string(epoch) + ", step " + std::to_string(step));
}

}  // namespace pl

namespace pl {

// Horovod's broadcast_optimizer_state: rank 0's optimizer state (its tensors and scalars, the
// learning rate among them) replaces every other rank's.  Rank 0 serialises it as a checkpoint's
// optimizer file; the bytes go through the metrics allgather (the other ranks send nothing), so
// the cost is one collective of the state's size, once per fit.
void Trainer::Impl::broadcast_optimizer_state() {
  if (world <= 1) return;
  plrt::sdk::Collectives c = collectives();
  const std::string mine =
      rank == 0 ? safetensors::serialize(optimizer->state_tensors(), optimizer_metadata(*optimizer)) : std::string();
  const std::vector<std::string> all = c.allgather(mine);
  if (rank == 0) return;
  safetensors::File f = safetensors::parse(all.at(0), "rank 0's optimizer state");
  const std::string name = f.metadata[plrt::sdk::kOptimizerNameKey];
  if (name != optimizer->name())
    throw Error(PL_ERR_INVALID_ARGUMENT, "rank 0's optimizer is " + name + " but this rank's (" + std::to_string(rank) +
                                             ") is " + optimizer->name() +
                                             ": configure_optimizers must make the same optimizer on every rank");
  optimizer->load_state(f.tensors, plrt::sdk::optimizer_scalars(f.metadata, "rank 0's optimizer state"));
}

}  // namespace pl
