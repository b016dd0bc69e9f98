// Resuming a run, for restarts and elastic jobs (a launcher restarting every worker after a
// failure, possibly at another world size):
//  - ckpt_path "last" (and "" when PL_RESTART_COUNT > 0): the newest complete checkpoint under
//    <root>/lightning_logs/version_*/checkpoints/; "complete" is a folder the atomic save renamed into
//    place (not a ".tmp-<pid>" / ".old-<pid>" leftover) with trainer.json (format plrt-checkpoint) and
//    model.safetensors; "newest" is the highest (global_step, epoch, samples_done) in trainer.json,
//    ties to the higher version number, then to the name "last".  By recorded progress, not by
//    modification time: copying a folder or a node's skewed clock changes no choice.  Rank 0 picks
//    and tells the others through the metrics allgather (every rank then loads the same folder, on
//    a file system they share); a strategy with no collective route lets each rank pick from the
//    same files.  The resumed run keeps logging into that version_<n> folder (one job's logs stay
//    together across restarts); an explicit path starts a new version, as Lightning does.  With no
//    checkpoint at all, "last" warns (as Lightning) and trains from scratch; a restarted job
//    (PL_RESTART_COUNT > 0) says so at info and logs again in the version folder its first round
//    opened, found by the marker ".plrt-job" (a one-way key of PL_JOB_TOKEN) that round wrote.
//  - leftovers: rank 0, at fit's start, removes the ".tmp-<pid>" / ".old-<pid>" leftovers of
//    interrupted writes (a kill during a save) in every version folder of the root, their
//    checkpoints/ and the folder of the checkpoint it resumes from, when their process is gone
//    (kill(pid, 0) fails with ESRCH).
//    No save of this job is in flight then (only rank 0 commits checkpoints, and it has not begun);
//    the pid check keeps the in-flight save of a live process on this machine (a previous worker
//    still being torn down).  A pid from another machine that is alive here keeps its leftover.
//  - the data position: trainer.json's samples_done, positions of the epoch's global order consumed
//    (DataLoader::position_after), so a run at another world size resumes the epoch's rest split
//    over its ranks (DataLoader::set_start); the learning rate stays the checkpoint's, and rank 0
//    says how the samples per optimizer step changed.
#include <algorithm>
#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/uuid_io.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/atomic_file.hpp>
#include <tuple>

#include "hparams_yaml.hpp"
#include "trainer_impl.hpp"

namespace pl {

namespace {

namespace fs = std::filesystem;

struct Found {
  std::string path, version_dir;
  std::tuple<int64_t, int64_t, int64_t, int64_t, int> key;  // step, epoch, samples_done, version, is "last"
  int64_t step = 0;
};

// The version number of "version_<digits>", else -1.
int64_t version_of(const std::string& name) {
  if (name.rfind("version_", 0) != 0 || name.size() == 8 || name.size() > 17) return -1;
  if (name.find_first_not_of("0123456789", 8) != std::string::npos) return -1;
  return std::stoll(name.substr(8));
}

// The newest complete checkpoint under root/lightning_logs (see the top of this file); `skipped`
// gets the folders that look like checkpoints but are not readable ones.
std::optional<Found> newest_checkpoint(const std::string& root, std::vector<std::string>& skipped) {
  std::optional<Found> best;
  std::error_code ec;
  const fs::path base = fs::path(root) / "lightning_logs";
  for (fs::directory_iterator v(base, ec), end; !ec && v != end; v.increment(ec)) {
    const int64_t version = version_of(v->path().filename().string());
    if (version < 0) continue;
    std::error_code ec2;
    for (fs::directory_iterator c(v->path() / "checkpoints", ec2); !ec2 && c != end; c.increment(ec2)) {
      const std::string name = c->path().filename().string();
      if (is_atomic_leftover_name(name) || !c->is_directory(ec2)) continue;
      const fs::path ckpt = c->path();
      if (!fs::exists(ckpt / "trainer.json", ec2) || !fs::exists(ckpt / "model.safetensors", ec2)) {
        skipped.push_back(ckpt.string() + " (no trainer.json or model.safetensors)");
        continue;
      }
      try {
        auto j = nlohmann::json::parse(read_file((ckpt / "trainer.json").string()));
        if (j.value("format", "") != "plrt-checkpoint") throw std::runtime_error("not a plrt-checkpoint");
        Found f;
        f.path = ckpt.string();
        f.version_dir = v->path().string();
        f.step = j.at("global_step").get<int64_t>();
        f.key = {f.step, j.at("epoch").get<int64_t>(), j.value("samples_done", j.value("batches_done", int64_t{0})),
                 version, name == "last" ? 1 : 0};
        if (!best || f.key > best->key) best = f;
      } catch (const std::exception& e) {
        skipped.push_back(ckpt.string() + " (trainer.json: " + e.what() + ")");
      }
    }
  }
  return best;
}

}  // namespace

// The key of a job in its version folder's marker: a one-way hash (a name-based UUID, SHA-1) of
// PL_JOB_TOKEN, which plrun gives every round of one job and no other job; "" without one.
std::string Trainer::Impl::job_key_of(const char* token) {
  if (!token || !*token) return "";
  boost::uuids::name_generator_sha1 gen(boost::uuids::ns::oid());
  return boost::uuids::to_string(gen(std::string("plrt-job:") + token));
}

void Trainer::Impl::check_resume_path(const std::string& ckpt) {
  if (ckpt.empty() || ckpt == "last") return;
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(ckpt) / "trainer.json", ec))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "ckpt_path '" + ckpt + "' is not a checkpoint folder (there is no " + ckpt +
                    "/trainer.json); valid: a folder save_checkpoint wrote (e.g. "
                    "<root>/lightning_logs/version_<n>/checkpoints/last), \"last\" (the newest checkpoint under "
                    "<root>/lightning_logs) or \"\" (from scratch)");
}

std::string Trainer::Impl::resolve_resume(const std::string& ckpt) {
  std::string want = ckpt;
  if (want.empty() && restart_count > 0) {
    want = "last";
    if (rank == 0)
      info("PL_RESTART_COUNT=" + std::to_string(restart_count) +
           ": a restarted job resumes from its newest checkpoint (ckpt_path \"last\")");
  }
  if (want != "last") {
    open_log_dir("");
    resumed_from = want;
    return want;
  }
  plrt::sdk::Collectives c = collectives();
  const bool told = world > 1 && c.world_size() > 1;  // else every rank reads the same files itself
  std::string answer;  // "ok\n<path>\n<version dir>\n<step>" (path "" for none) or "error\n<what>"
  if (rank == 0 || !told) {
    try {
      std::vector<std::string> skipped;
      auto found = newest_checkpoint(o.default_root_dir, skipped);
      if (rank == 0)
        for (const auto& s : skipped) warn("ckpt_path \"last\": skipping " + s);
      answer = found ? "ok\n" + found->path + "\n" + found->version_dir + "\n" + std::to_string(found->step) : "ok\n";
    } catch (const std::exception& e) {
      answer = std::string("error\n") + e.what();
    }
  }
  if (told) answer = c.allgather(rank == 0 ? answer : std::string()).at(0);
  if (answer.rfind("ok\n", 0) != 0)
    throw Error(PL_ERR_RUNTIME, "ckpt_path \"last\": rank 0 could not search " + o.default_root_dir +
                                    "/lightning_logs: " + answer.substr(answer.find('\n') + 1));
  std::vector<std::string> parts;
  for (size_t at = 3; at <= answer.size();) {
    size_t nl = answer.find('\n', at);
    if (nl == std::string::npos) nl = answer.size();
    parts.push_back(answer.substr(at, nl - at));
    at = nl + 1;
  }
  if (parts.size() < 3 || parts[0].empty()) {
    // Lightning warns; a restarted job (a death before its first checkpoint) says it at info, and
    // keeps logging in the version folder its first round opened: one job, one folder of logs.
    const std::string own = restart_count > 0 && rank == 0 ? own_version_dir() : std::string();
    if (rank == 0)
      rt->log(restart_count > 0 ? PL_LOG_INFO : PL_LOG_WARN,
              "ckpt_path \"last\": no checkpoint under " + (fs::path(o.default_root_dir) / "lightning_logs").string() +
                  "; training from scratch" + (own.empty() ? "" : " (logging again in " + own + ")"));
    open_log_dir(own, 0);
    resumed_from.clear();
    return "";
  }
  open_log_dir(parts[1], std::stoll(parts[2]));
  resumed_from = parts[0];
  return parts[0];
}

void Trainer::Impl::open_log_dir(const std::string& continue_in, int64_t keep_before) {
  if (log_ready) return;
  log_ready = true;
  if (rank == 0 && o.fast_dev_run == 0) {  // logs (and checkpoints) are written by rank 0; fast_dev_run writes none
    const fs::path base = fs::path(o.default_root_dir) / "lightning_logs";
    std::error_code ec;
    if (!continue_in.empty()) {
      log_dir = continue_in;
    } else {
      int64_t version = 0;
      if (fs::exists(base, ec))
        for (const auto& e : fs::directory_iterator(base, ec)) {
          const std::string n = e.path().filename().string();
          if (n.rfind("version_", 0) == 0) version = std::max<int64_t>(version, std::atoll(n.c_str() + 8) + 1);
        }
      log_dir = (base / ("version_" + std::to_string(version))).string();
    }
    fs::create_directories(log_dir, ec);
    if (ec) throw Error(PL_ERR_RUNTIME, "cannot create the log folder " + log_dir + ": " + ec.message());
    if (continue_in.empty() && !job_key.empty()) write_file_atomic(log_dir + "/" + kJobMarker, job_key + "\n");
    loggers.configure(plrt::sdk::parse_logger_names(o.logger, "logger"));
    if (continue_in.empty())
      loggers.open(log_dir);
    else
      loggers.open_existing(log_dir, keep_before);
    write_hparams();
  }
  rt->log(rank == 0 ? PL_LOG_INFO : PL_LOG_DEBUG,
          "trainer: " + job.strategy + " on " + job.accelerator + ", " + std::to_string(world) + " process(es), rank " +
              std::to_string(rank) + (log_dir.empty() ? "" : ", logs in " + log_dir));
}

// Lightning's hparams.yaml: the module's save_hyperparameters, and the knobs this trainer resolved
// (after PL_TRAINER_* overrides and the job's resolution) under "trainer".
void Trainer::Impl::write_hparams() const {
  if (rank != 0 || log_dir.empty()) return;
  HParams knobs{{"accelerator", job.accelerator},
                {"strategy", job.strategy},
                {"num_nodes", job.num_nodes},
                {"devices_per_node", job.processes_per_node},
                {"world_size", world},
                {"precision", job.precision},
                {"process_group_backend", job.process_group_backend},
                // unset: Lightning's None, i.e. 1000 epochs without max_steps, else no limit (-1)
                {"max_epochs", static_cast<long long>(o.max_epochs      ? *o.max_epochs
                                                      : o.max_steps < 0 ? 1000
                                                                        : -1)},
                {"max_steps", static_cast<long long>(o.max_steps)},
                {"accumulate_grad_batches", o.accumulate_grad_batches},
                {"gradient_clip_val", o.gradient_clip_val},
                {"gradient_clip_algorithm", o.gradient_clip_algorithm},
                {"val_check_interval", o.val_check_interval.is_fraction()
                                           ? HParam(o.val_check_interval.fraction())
                                           : HParam(static_cast<long long>(o.val_check_interval.count()))},
                {"log_every_n_steps", static_cast<long long>(o.log_every_n_steps)},
                {"logger", o.logger},
                {"default_root_dir", o.default_root_dir},
                {"enable_checkpointing", o.enable_checkpointing},
                {"enable_model_summary", o.enable_model_summary},
                {"use_distributed_sampler", o.use_distributed_sampler}};
  if (o.seed) knobs.insert_or_assign("seed", static_cast<long long>(*o.seed));
  if (o.check_val_every_n_epoch)  // unset (Lightning's None): not written
    knobs.insert_or_assign("check_val_every_n_epoch", *o.check_val_every_n_epoch);
  write_file_atomic(log_dir + "/hparams.yaml", plrt::sdk::hparams_yaml(module ? module->hparams() : HParams{}, knobs));
}

// The newest version folder under the root whose marker names this job (PL_JOB_TOKEN's key), or "".
std::string Trainer::Impl::own_version_dir() const {
  if (job_key.empty()) return "";
  std::error_code ec;
  int64_t best = -1;
  std::string found;
  const fs::path base = fs::path(o.default_root_dir) / "lightning_logs";
  for (fs::directory_iterator v(base, ec), end; !ec && v != end; v.increment(ec)) {
    const int64_t version = version_of(v->path().filename().string());
    if (version <= best) continue;
    std::ifstream in(v->path() / kJobMarker);
    std::string key;
    if (in >> key && key == job_key) {
      best = version;
      found = v->path().string();
    }
  }
  return found;
}

void Trainer::Impl::clean_leftovers(const std::string& resumed) {
  if (rank != 0 || log_dir.empty()) return;
  // Every version folder of the root and its checkpoints/: a job killed during its first save
  // restarted (before this rule) into a version folder of its own, and an explicit resume may
  // start a new one; the dead writers' leftovers anywhere under the root are garbage.
  std::vector<fs::path> folders{fs::path(log_dir), fs::path(log_dir) / "checkpoints"};
  std::error_code list_ec;
  const fs::path base = fs::path(o.default_root_dir) / "lightning_logs";
  for (fs::directory_iterator v(base, list_ec), end; !list_ec && v != end; v.increment(list_ec))
    if (version_of(v->path().filename().string()) >= 0) {
      folders.push_back(v->path());
      folders.push_back(v->path() / "checkpoints");
    }
  if (!resumed.empty()) {
    const fs::path parent = fs::path(resumed).lexically_normal().parent_path();
    folders.push_back(parent.empty() ? fs::path(".") : parent);
  }
  std::vector<fs::path> done;
  for (const auto& f : folders) {
    std::error_code ec;
    const fs::path key = fs::weakly_canonical(f, ec);
    if (std::find(done.begin(), done.end(), key) != done.end()) continue;
    done.push_back(key);
    try {
      const int n = clean_atomic_leftovers_in(f.string());
      if (n > 0)
        info("removed " + std::to_string(n) + " leftover(s) of interrupted writes (a killed save) in " + f.string());
    } catch (const std::exception& e) {
      warn(std::string("could not remove the leftovers of interrupted writes: ") + e.what());
    }
  }
}

void Trainer::Impl::resume_position(DataLoader& train) {
  const int64_t n = train.dataset().size();
  // Every batch takes at least one sample: no epoch has more batches than samples, whatever the
  // batch size and world size it was saved with.
  if (!resumed_from.empty() && epoch_batches > n)
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + resumed_from + " resumes epoch " + std::to_string(epoch) +
                                             " after batches_done " + std::to_string(epoch_batches) +
                                             " but an epoch of the " + std::to_string(n) +
                                             " training samples has at most " + std::to_string(n) +
                                             " batches: resume with the data it was saved with");
  if (legacy_batches >= 0) {  // a checkpoint without samples_done: its world size's batches of this batch size
    const int64_t per = train.options().batch_size * (train.distributed() ? std::max(legacy_world, 1) : 1);
    epoch_samples = std::min(n, legacy_batches * per);
    legacy_batches = -1;
  }
  if (epoch_samples > n)
    throw Error(PL_ERR_INVALID_ARGUMENT, "checkpoint " + resumed_from + " resumes epoch " + std::to_string(epoch) +
                                             " at sample position " + std::to_string(epoch_samples) +
                                             " but the training set has " + std::to_string(n) +
                                             " samples: resume with the data it was saved with");
}

void Trainer::Impl::report_resume() {
  if (rank != 0 || resumed_from.empty()) return;
  const int64_t now = effective_batch * o.accumulate_grad_batches;
  if (resumed_world == world && (resumed_step_batch == 0 || resumed_step_batch == now)) return;
  const auto scalars = optimizer->state_scalars();
  const auto lr = scalars.find("lr");
  warn("resuming " + resumed_from + " (saved by " + std::to_string(resumed_world) + " process(es)) with " +
       std::to_string(world) + ": the samples per optimizer step change from " +
       (resumed_step_batch > 0 ? std::to_string(resumed_step_batch) : std::string("?")) + " to " + std::to_string(now) +
       "; the learning rate stays the checkpoint's" +
       (lr != scalars.end() ? " (" + plrt::sdk::num(lr->second) + ")" : std::string()) +
       " and the epoch's remaining samples are split over the " + std::to_string(world) + " process(es)");
}

void Trainer::Impl::save_last() {
  save_checkpoint(log_dir.empty() ? "" : log_dir + "/checkpoints/last");
  last_checkpoint = std::chrono::steady_clock::now();
}

bool Trainer::Impl::checkpoint_due_by_steps() const {
  return o.enable_checkpointing && o.checkpoint_every_n_steps > 0 && step % o.checkpoint_every_n_steps == 0;
}

}  // namespace pl
