// The samples' Trainer flags (trainer_flags.hpp).
#include "trainer_flags.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <plrt/sdk/exit_code.hpp>
#include <plrt/sdk/options.hpp>

namespace {

// --seed: an integer 0..2^64-1 (CLI11 would wrap -1 to 2^64-1 and saturate a longer number).
uint64_t parse_seed(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || *end != '\0' || errno == ERANGE)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "--seed '" + text + "' is not valid: it must be an integer 0..18446744073709551615");
  return v;
}

// --check-val-every-n-epoch: an integer 1..2^31-1, or None (Lightning's: every epoch, batches
// counted across epochs).
std::optional<int> parse_every_n_epochs(const std::string& text) {
  if (text == "None" || text == "none") return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || *end != '\0' || errno == ERANGE ||
      v < 1 || v > 2147483647)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--check-val-every-n-epoch '" + text +
                                                 "' is not valid: it must be an integer 1..2147483647 or None");
  return static_cast<int>(v);
}

double parse_number(const char* flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string(flag) + " '" + text + "' is not a number");
  return v;
}

}  // namespace

void add_trainer_flags(CLI::App& app, TrainerFlags& f) {
  pl::TrainerOptions& o = f.options;
  app.add_option("--epochs", f.epochs, "Training epochs (-1: no limit; stop with --max-steps)")->capture_default_str();
  app.add_option("--max-steps", f.max_steps, "Stop after this many optimizer steps (-1: no limit)")
      ->capture_default_str();
  app.add_option("--seed", f.seed_text, "seed_everything's seed (0..2^64-1)")->capture_default_str();
  app.add_option("--timeout", f.timeout_s, "Seconds the store connection and each collective may take (0: the default)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--accelerator", o.accelerator, "cpu, cuda, auto")->capture_default_str();
  app.add_option("--devices", f.devices, "Lightning's devices (cpu: processes)")->capture_default_str();
  app.add_option("--strategy", o.strategy, "auto, ddp, ddp_spawn, dp, ddp2, single_device, ...")->capture_default_str();
  app.add_option("--strategy-option", f.strategy_options,
                 "A strategy option KEY=VALUE, e.g. bucket_cap_mb=10 (repeatable; a later one overrides an earlier "
                 "one for its key; plrun's --strategy-option wins over these)")
      ->allow_extra_args(false);
  app.add_option("--num-nodes", o.num_nodes, "Machines")->capture_default_str();
  app.add_option("--precision", o.precision, "32-true, 16-mixed, bf16-mixed (or 32, 16, bf16)")->capture_default_str();
  app.add_option("--accumulate-grad-batches", o.accumulate_grad_batches, "Batches per optimizer step")
      ->capture_default_str();
  app.add_option("--gradient-clip-val", f.clip_val, "Clip gradients at this value (0: no clipping)")
      ->capture_default_str();
  app.add_option("--gradient-clip-algorithm", o.gradient_clip_algorithm, "norm or value")->capture_default_str();
  app.add_option("--root-dir", o.default_root_dir, "Where lightning_logs/ goes")->capture_default_str();
  app.add_option("--logger", o.logger, "Loggers in lightning_logs/version_<n>/: csv, tensorboard (comma-separated)")
      ->capture_default_str();
  app.add_flag("--no-checkpoint", f.no_checkpoint,
               "Write no checkpoint (by default checkpoints/last after every epoch)");
  app.add_option("--checkpoint-every-steps", o.checkpoint_every_n_steps,
                 "Also write checkpoints/last every N optimizer steps (0: off)")
      ->capture_default_str();
  app.add_option("--checkpoint-every-seconds", f.every_seconds,
                 "Also write checkpoints/last once T seconds passed since the last one (0: off)")
      ->capture_default_str();
  app.add_flag("--no-progress-bar", f.no_progress_bar,
               "No progress output: no live bar on a terminal, no per-epoch lines elsewhere "
               "(enable_progress_bar=false)");
  app.add_flag("--no-model-summary", f.no_model_summary,
               "No model summary table at fit's start (enable_model_summary=false)");
  // Lightning's loop limits (TrainerOptions; a count like 10 or a fraction like 0.25)
  app.add_option("--fast-dev-run", o.fast_dev_run,
                 "Run N batches of training and validation and write nothing: no logs, no checkpoint (off by default; "
                 "the flag alone: 1)")
      ->expected(0, 1)
      ->default_str("1");
  app.add_option("--limit-train-batches", f.limit_train,
                 "Batches per training epoch: a count (10) or a fraction (0.25)")
      ->capture_default_str();
  app.add_option("--limit-val-batches", f.limit_val, "Batches per validation: a count (10) or a fraction (0.25)")
      ->capture_default_str();
  app.add_option("--min-epochs", f.min_epochs, "Epochs to train before early stopping may end fit")
      ->capture_default_str();
  app.add_option("--min-steps", o.min_steps, "Optimizer steps to take before early stopping may end fit (-1: none)")
      ->capture_default_str();
  app.add_option("--num-sanity-val-steps", o.num_sanity_val_steps,
                 "Validation batches run before training to catch a broken validation step (-1: all, 0: none)")
      ->capture_default_str();
  app.add_option("--log-every-n-steps", o.log_every_n_steps, "Step values reach the loggers every N steps")
      ->capture_default_str();
  app.add_option("--profiler", o.profiler,
                 "simple: a table of where fit's time went (printed, and per rank in <log dir>/profiler/); trace: "
                 "also a Chrome trace per rank (profiler/rank<r>.trace.json, for Perfetto)");
  app.add_option("--val-check-interval", f.val_every,
                 "Validate after every N training batches (a count, 100) or N times an epoch (a fraction, 0.25)")
      ->capture_default_str();
  app.add_option("--check-val-every-n-epoch", f.val_epochs,
                 "Validate in every N-th epoch (None: every epoch, --val-check-interval counted across epochs)")
      ->capture_default_str();
}

void apply_trainer_flags(const CLI::App& app, TrainerFlags& f) {
  pl::TrainerOptions& o = f.options;
  for (const auto& text : f.strategy_options) {
    auto [key, value] = pl::parse_option_assignment("--strategy-option", text);
    pl::set_option(o.strategy_options, key, value);
  }
  o.devices = pl::Devices::from_text(f.devices);
  if (f.epochs < -1)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "--epochs " + std::to_string(f.epochs) + " is not valid: use -1 (no limit) or >= 0");
  if (f.max_steps < -1)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "--max-steps " + std::to_string(f.max_steps) + " is not valid: use -1 (no limit) or >= 0");
  o.max_epochs = f.epochs;
  o.max_steps = f.max_steps;
  o.limit_train_batches = pl::BatchLimit::parse("--limit-train-batches", f.limit_train);
  o.limit_val_batches = pl::BatchLimit::parse("--limit-val-batches", f.limit_val);
  o.val_check_interval = pl::BatchLimit::parse("--val-check-interval", f.val_every);
  o.check_val_every_n_epoch = parse_every_n_epochs(f.val_epochs);
  if (app.count("--min-epochs")) o.min_epochs = f.min_epochs;
  f.seed = parse_seed(f.seed_text);
  o.seed = f.seed;
  o.timeout = std::chrono::milliseconds(static_cast<long long>(f.timeout_s * 1000));
  f.checkpointing = !f.no_checkpoint;
  o.enable_checkpointing = f.checkpointing;
  if (f.no_progress_bar) o.enable_progress_bar = false;
  if (f.no_model_summary) o.enable_model_summary = false;
  o.checkpoint_every_seconds = parse_number("--checkpoint-every-seconds", f.every_seconds);
  // a number here; its range (finite, >= 0) and the algorithm are the Trainer's checks
  o.gradient_clip_val = parse_number("--gradient-clip-val", f.clip_val);
}

int parse_flags(CLI::App& app, int argc, char** argv, const std::string& program) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::cerr << program << ": error: " << e.what() << "\n(see " << program << " --help)\n";
    return pl::kExitBadInput;
  }
}

bool report_interrupted(pl::Trainer& trainer, const std::string& program) {
  if (!trainer.interrupted()) return false;  // preempted (SIGTERM under SLURM): the checkpoint holds the run
  if (trainer.is_global_zero())
    std::printf("%s: stopped by SIGTERM after %lld steps; resume with --resume %s/checkpoints/last\n", program.c_str(),
                static_cast<long long>(trainer.global_step()), trainer.log_dir().c_str());
  return true;
}

void print_fit_summary(pl::Trainer& trainer, const std::string& program, double seconds) {
  if (!trainer.is_global_zero()) return;
  const auto& m = trainer.callback_metrics();
  char held[96] = "no validation ran (no held-out data, or no epoch finished)";
  if (m.count("val_acc") && m.count("val_loss"))
    std::snprintf(held, sizeof held, "held-out accuracy %.4f, loss %.4f", m.at("val_acc"), m.at("val_loss"));
  std::printf("%s: %lld steps in %.2f s (%.1f steps/s); %s\n", program.c_str(),
              static_cast<long long>(trainer.global_step()), seconds,
              static_cast<double>(trainer.global_step()) / seconds, held);
}

void check_output_path(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string(flag) + " " + path + " is a folder; give a file path");
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!fs::is_directory(parent, ec))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string(flag) + " " + path + ": the folder " + parent.string() +
                                                 " does not exist; create it first or give another path");
  if (::access(parent.c_str(), W_OK) != 0)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    std::string(flag) + " " + path + ": the folder " + parent.string() + " is not writable");
}

void write_report(const std::string& path, pl::Trainer& trainer, double seconds, const nlohmann::json& extra) {
  nlohmann::json j;
  j["steps"] = trainer.global_step();
  j["samples_trained"] = trainer.samples_trained();
  j["epoch"] = trainer.current_epoch();
  j["restart_count"] = trainer.restart_count();
  j["resumed_from"] = trainer.resumed_from();
  j["seconds"] = seconds;
  j["world_size"] = trainer.world_size();
  j["strategy"] = trainer.job().strategy;
  j["metrics"] = trainer.callback_metrics();
  j["precision"] = trainer.job().precision;
  j["effective_batch_size"] = trainer.effective_batch_size();
  j["replicas"] = trainer.num_replicas();
  j["loss_scale"] = trainer.loss_scale();
  j["skipped_steps"] = trainer.skipped_steps();
  j["optimizer_state_bytes"] = trainer.optimizer_state_bytes();
  for (const char* stat :
       {"exposed_allreduce_ms", "allreduce_ms",         "early_launches",    "buckets",           "stage",
        "grad_bytes",           "param_bytes",          "owned_param_bytes", "comm_buffer_bytes", "bucket_bytes",
        "grad_comm_ms",         "exposed_grad_comm_ms", "allgather_ms",      "bytes_per_step",    "async_rounds",
        "async_comm_ms",        "async_round_bytes",    "async_syncs",       "synced_steps",      "cycles",
        "allreduces",           "fused_tensors",        "allreduce_bytes"}) {
    try {
      j["strategy_stats"][stat] = trainer.strategy_stat(stat);
    } catch (const pl::Error&) {
    }
  }
  j.update(extra);
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out.flush()) throw pl::Error(PL_ERR_RUNTIME, "--report " + path + ": could not write the file");
}
