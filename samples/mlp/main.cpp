// plrt-mlp: trains a multilayer perceptron classifier with the plrt SDK.
//
//   plrun --strategy ddp --devices 2 -- plrt-mlp --epochs 5
//   plrt-mlp --strategy ddp_spawn --devices 2 --data mnist.safetensors --save mlp.safetensors
//   plrun --strategy ddp --devices 2 -- plrt-mlp --data digits.safetensors --val-data digits-val.safetensors
//   plrt-mlp --strategy dp --devices 2 --precision bf16-mixed
//   plrun --strategy ddp --devices 2 -- plrt-mlp --strategy-option bucket_cap_mb=0.5
//   plrun --max-restarts 3 ... -- plrt-mlp --checkpoint-every-steps 100   (a restart resumes from 'last')
//
// Exit codes (pl::exit_code_for, plrt/sdk/exit_code.hpp): 0 success, 2 bad input (a flag CLI11
// refuses, a bad value, a strategy or plugin not found or of another ABI; the error on stderr), 143
// when stopped by SIGTERM with a checkpoint, 1 anything else.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <plrt/sdk/early_stopping.hpp>
#include <plrt/sdk/exit_code.hpp>
#include <plrt/sdk/model_checkpoint.hpp>
#include <plrt/sdk/options.hpp>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/sdk/trainer.hpp>
#include <sstream>

#include "mlp_data.hpp"
#include "mlp_module.hpp"

namespace {

std::vector<int64_t> parse_hidden(const std::string& text) {
  std::vector<int64_t> out;
  if (text.empty() || text == "none") return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1)
      throw pl::Error(
          PL_ERR_INVALID_ARGUMENT,
          "--hidden '" + text + "': '" + item + "' is not a positive layer width (write widths like 256,128, or none)");
    out.push_back(v);
  }
  return out;
}

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

// An output file of --save / --report, checked before training so that a bad path loses no work:
// its folder must exist and be writable, and the path must not be a folder.
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

// The model --hidden asks for must fit before any work: its parameter count without overflow, and
// its float32 weights and gradients (8 bytes a parameter, before any optimizer state) within this
// machine's memory.  (Without the check a width like 99999999999 started, then failed allocating.)
void check_model_size(int64_t features, const std::vector<int64_t>& hidden, int64_t classes, const std::string& text) {
  std::vector<int64_t> sizes{features};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(classes);
  int64_t count = 0;
  bool overflow = false;
  for (size_t i = 0; i + 1 < sizes.size() && !overflow; ++i) {
    int64_t layer = 0;  // in * out weights + out biases
    overflow = __builtin_mul_overflow(sizes[i], sizes[i + 1], &layer) ||
               __builtin_add_overflow(layer, sizes[i + 1], &layer) || __builtin_add_overflow(count, layer, &count);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double memory = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
  const double needed = static_cast<double>(count) * 8.0;
  if (!overflow && (memory == 0.0 || needed <= memory)) return;
  auto gib = [](double bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f GiB", bytes / (1 << 30));
    return std::string(b);
  };
  std::string shape;
  for (int64_t s : sizes) shape += (shape.empty() ? "" : "-") + std::to_string(s);
  const std::string model = "--hidden '" + text + "': the model " + shape;
  if (overflow)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    model + " would have more parameters than a 64-bit count holds; give smaller widths");
  throw pl::Error(PL_ERR_INVALID_ARGUMENT, model + " would have " + std::to_string(count) + " parameters (" +
                                               gib(needed) +
                                               " of float32 weights and gradients), more than this "
                                               "machine's " +
                                               gib(memory) + " of memory; give smaller widths");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("plrt-mlp: an MLP classifier trained with plrt (Lightning's Trainer for C++)", "plrt-mlp");
  std::string data, val_data, init, save, report, hidden = "256,128", optimizer = "sgd", resume;
  int64_t epochs = 5, batch_size = 64, max_steps = -1, early_patience = 0, top_k = 0;
  double lr = 0.05, momentum = 0.9, heldout = 0.125, weight_decay = -1;
  int64_t warmup_steps = 100;
  bool nesterov = false;
  std::string seed_text = "42";
  bool no_shuffle = false;
  SyntheticSpec synth;
  pl::TrainerOptions topt;
  std::string devices = "auto";
  app.add_option("--data", data,
                 "safetensors file with x (F32 [N, D]) and y (I64 [N]), trained on in file order (with "
                 "--no-shuffle); default: built-in synthetic data");
  app.add_option("--val-data", val_data,
                 "safetensors file of validation data (as --data's), instead of a held-out part of --data");
  app.add_option("--hidden", hidden, "Hidden layer widths, e.g. 256,128 (or none)")->capture_default_str();
  app.add_option("--epochs", epochs, "Training epochs (-1: no limit; stop with --max-steps)")->capture_default_str();
  app.add_option("--max-steps", max_steps, "Stop after this many optimizer steps (-1: no limit)")
      ->capture_default_str();
  app.add_option("--batch-size", batch_size, "Samples per batch and process")->capture_default_str();
  app.add_option("--lr", lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", momentum, "SGD momentum")->capture_default_str();
  app.add_option("--optimizer", optimizer, "sgd, adam, adamw or qadam (bagua's qadam needs it)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "qadam"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", warmup_steps, "qadam: optimizer steps run as Adam first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--nesterov", nesterov, "SGD: Nesterov momentum");
  app.add_option("--weight-decay", weight_decay, "Weight decay (default: the optimizer's, 0; AdamW 0.01)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed_text, "seed_everything's seed (0..2^64-1)")->capture_default_str();
  double timeout_s = 0;
  app.add_option("--timeout", timeout_s, "Seconds the store connection and each collective may take (0: the default)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-shuffle", no_shuffle, "Keep the training data in order");
  app.add_option("--init", init, "Initial weights (safetensors, layers.<i>.weight/bias)");
  app.add_option("--save", save, "Write the trained weights here (safetensors, PyTorch nn.Linear layout)");
  app.add_option("--resume", resume,
                 "Resume from a checkpoint folder, or 'last': the newest under <root-dir>/lightning_logs (a "
                 "restarted worker, PL_RESTART_COUNT > 0, resumes from 'last' without it)");
  app.add_option("--heldout", heldout,
                 "Fraction of the data held out for validation, rows drawn from --seed; both parts keep the "
                 "file's order (0: train on the data as they are; --val-data: default 0)")
      ->capture_default_str();
  app.add_option("--samples", synth.samples, "Synthetic data: samples")->capture_default_str();
  app.add_option("--features", synth.features, "Synthetic data: features")->capture_default_str();
  app.add_option("--classes", synth.classes,
                 "Classes (synthetic data; with --data: labels must be below it, default max label + 1, at most " +
                     std::to_string(kMaxInferredClasses) + ")")
      ->capture_default_str();
  app.add_option("--accelerator", topt.accelerator, "cpu, cuda, auto")->capture_default_str();
  app.add_option("--devices", devices, "Lightning's devices (cpu: processes)")->capture_default_str();
  app.add_option("--strategy", topt.strategy, "auto, ddp, ddp_spawn, dp, ddp2, single_device, ...")
      ->capture_default_str();
  std::vector<std::string> strategy_options;
  app.add_option("--strategy-option", strategy_options,
                 "A strategy option KEY=VALUE, e.g. bucket_cap_mb=10 (repeatable; a later one overrides an earlier "
                 "one for its key; plrun's --strategy-option wins over these)")
      ->allow_extra_args(false);
  app.add_option("--num-nodes", topt.num_nodes, "Machines")->capture_default_str();
  app.add_option("--precision", topt.precision, "32-true, 16-mixed, bf16-mixed (or 32, 16, bf16)")
      ->capture_default_str();
  bool whole_batch_loss = false;
  app.add_flag("--whole-batch-loss", whole_batch_loss,
               "dp/ddp2: compute the loss over the whole batch in training_step_end (two-phase step)");
  app.add_option("--accumulate-grad-batches", topt.accumulate_grad_batches, "Batches per optimizer step")
      ->capture_default_str();
  std::string clip_val = "0";
  app.add_option("--gradient-clip-val", clip_val, "Clip gradients at this value (0: no clipping)")
      ->capture_default_str();
  app.add_option("--gradient-clip-algorithm", topt.gradient_clip_algorithm, "norm or value")->capture_default_str();
  app.add_option("--root-dir", topt.default_root_dir, "Where lightning_logs/ goes")->capture_default_str();
  app.add_option("--logger", topt.logger, "Loggers in lightning_logs/version_<n>/: csv, tensorboard (comma-separated)")
      ->capture_default_str();
  bool no_checkpoint = false;
  app.add_flag("--no-checkpoint", no_checkpoint, "Write no checkpoint (by default checkpoints/last after every epoch)");
  app.add_option("--checkpoint-every-steps", topt.checkpoint_every_n_steps,
                 "Also write checkpoints/last every N optimizer steps (0: off)")
      ->capture_default_str();
  std::string every_seconds = "0";
  app.add_option("--checkpoint-every-seconds", every_seconds,
                 "Also write checkpoints/last once T seconds passed since the last one (0: off)")
      ->capture_default_str();
  bool no_progress_bar = false;
  app.add_flag("--no-progress-bar", no_progress_bar,
               "No progress output: no live bar on a terminal, no per-epoch lines elsewhere "
               "(enable_progress_bar=false)");
  bool no_model_summary = false;
  app.add_flag("--no-model-summary", no_model_summary,
               "No model summary table at fit's start (enable_model_summary=false)");
  app.add_option("--early-stopping", early_patience,
                 "Stop when val_loss has not improved for this many epochs (EarlyStopping; 0: off)")
      ->capture_default_str();
  app.add_option("--save-top-k", top_k,
                 "Keep the k checkpoints of best val_acc in checkpoints/ (ModelCheckpoint; 0: off, -1: all)")
      ->capture_default_str();
  app.add_option("--report", report, "Write a JSON summary here (rank 0): metrics, steps/s, strategy statistics");
  // Lightning's loop limits (TrainerOptions; a count like 10 or a fraction like 0.25)
  app.add_option("--fast-dev-run", topt.fast_dev_run,
                 "Run N batches of training and validation and write nothing: no logs, no checkpoint (off by default; "
                 "the flag alone: 1)")
      ->expected(0, 1)
      ->default_str("1");
  std::string limit_train = "1.0", limit_val = "1.0";
  app.add_option("--limit-train-batches", limit_train, "Batches per training epoch: a count (10) or a fraction (0.25)")
      ->capture_default_str();
  app.add_option("--limit-val-batches", limit_val, "Batches per validation: a count (10) or a fraction (0.25)")
      ->capture_default_str();
  int64_t min_epochs = 0;
  app.add_option("--min-epochs", min_epochs, "Epochs to train before early stopping may end fit")
      ->capture_default_str();
  app.add_option("--min-steps", topt.min_steps, "Optimizer steps to take before early stopping may end fit (-1: none)")
      ->capture_default_str();
  app.add_option("--num-sanity-val-steps", topt.num_sanity_val_steps,
                 "Validation batches run before training to catch a broken validation step (-1: all, 0: none)")
      ->capture_default_str();
  app.add_option("--log-every-n-steps", topt.log_every_n_steps, "Step values reach the loggers every N steps")
      ->capture_default_str();
  app.add_option("--profiler", topt.profiler,
                 "simple: a table of where fit's time went (printed, and per rank in <log dir>/profiler/); trace: "
                 "also a Chrome trace per rank (profiler/rank<r>.trace.json, for Perfetto)");
  std::string val_every = "1.0", val_epochs = "1";
  app.add_option("--val-check-interval", val_every,
                 "Validate after every N training batches (a count, 100) or N times an epoch (a fraction, 0.25)")
      ->capture_default_str();
  app.add_option("--check-val-every-n-epoch", val_epochs,
                 "Validate in every N-th epoch (None: every epoch, --val-check-interval counted across epochs)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::cerr << "plrt-mlp: error: " << e.what() << "\n(see plrt-mlp --help)\n";
    return pl::kExitBadInput;  // not CLI11's own codes (105 to 114), which would read as a failure
  }

  try {
    for (const auto& text : strategy_options) {
      auto [key, value] = pl::parse_option_assignment("--strategy-option", text);
      pl::set_option(topt.strategy_options, key, value);
    }
    topt.devices = pl::Devices::from_text(devices);
    if (epochs < -1)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "--epochs " + std::to_string(epochs) + " is not valid: use -1 (no limit) or >= 0");
    if (max_steps < -1)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "--max-steps " + std::to_string(max_steps) + " is not valid: use -1 (no limit) or >= 0");
    topt.max_epochs = epochs;
    topt.max_steps = max_steps;
    topt.limit_train_batches = pl::BatchLimit::parse("--limit-train-batches", limit_train);
    topt.limit_val_batches = pl::BatchLimit::parse("--limit-val-batches", limit_val);
    topt.val_check_interval = pl::BatchLimit::parse("--val-check-interval", val_every);
    topt.check_val_every_n_epoch = parse_every_n_epochs(val_epochs);
    if (app.count("--min-epochs")) topt.min_epochs = min_epochs;
    const uint64_t seed = parse_seed(seed_text);
    topt.seed = seed;
    topt.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    topt.enable_checkpointing = !no_checkpoint;
    if (no_progress_bar) topt.enable_progress_bar = false;
    if (no_model_summary) topt.enable_model_summary = false;
    {
      char* end = nullptr;
      topt.checkpoint_every_seconds = std::strtod(every_seconds.c_str(), &end);
      if (every_seconds.empty() || *end != '\0')
        throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--checkpoint-every-seconds '" + every_seconds + "' is not a number");
    }
    if (batch_size < 1)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--batch-size " + std::to_string(batch_size) + " must be >= 1");
    if (!(lr > 0)) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--lr " + std::to_string(lr) + " must be > 0");
    {  // a number here; its range (finite, >= 0) and the algorithm are the Trainer's checks
      char* end = nullptr;
      topt.gradient_clip_val = std::strtod(clip_val.c_str(), &end);
      if (clip_val.empty() || *end != '\0')
        throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--gradient-clip-val '" + clip_val + "' is not a number");
    }
    if (app.count("--classes") && synth.classes < 2)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "--classes " + std::to_string(synth.classes) + " is not valid: a classifier needs >= 2");
    if (!val_data.empty() && data.empty())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--val-data " + val_data + " needs --data (the training file)");
    const bool validates = heldout > 0 || !val_data.empty();
    if (early_patience < 0)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--early-stopping " + std::to_string(early_patience) +
                                                   " is not valid: use 0 (off) or >= 1 epochs");
    if (top_k < -1)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "--save-top-k " + std::to_string(top_k) + " is not valid: use 0 (off), -1 (all) or k >= 1");
    for (const auto& [flag, on] :
         {std::pair{"--early-stopping", early_patience > 0}, std::pair{"--save-top-k", top_k != 0}})
      if (on && !validates)
        throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string(flag) +
                                                     " watches the held-out data's val_loss / val_acc, but there is "
                                                     "none: give --heldout > 0 or --val-data");
    if (top_k != 0 && no_checkpoint)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--save-top-k writes checkpoints, which --no-checkpoint turns off");
    std::shared_ptr<pl::EarlyStopping> early;
    std::shared_ptr<pl::ModelCheckpoint> best;
    if (early_patience > 0) {
      pl::EarlyStoppingOptions eo;
      eo.monitor = "val_loss";
      eo.patience = early_patience;
      early = std::make_shared<pl::EarlyStopping>(eo);
      topt.callbacks.push_back(early);
    }
    if (top_k != 0) {
      pl::ModelCheckpointOptions co;
      co.monitor = "val_acc";
      co.mode = "max";
      co.save_top_k = top_k;
      co.filename = "{epoch}-{val_acc:.4f}";
      best = std::make_shared<pl::ModelCheckpoint>(co);
      topt.callbacks.push_back(best);
    }
    check_output_path("--save", save);
    check_output_path("--report", report);
    // The data before the Trainer: a bad file is bad input, found before any work.
    FileDataSpec file{data, val_data, app.count("--heldout") || val_data.empty() ? heldout : 0.0, seed,
                      app.count("--classes") ? synth.classes : 0};
    MlpData d = data.empty() ? make_synthetic(synth, heldout) : load_safetensors(file);
    const std::vector<int64_t> widths = parse_hidden(hidden);
    check_model_size(d.features, widths, d.classes, hidden);
    pl::Trainer trainer(topt);  // seeds everything first: the model's initial weights follow --seed
    MlpClassifier model(d.features, widths, d.classes, {optimizer, lr, momentum, nesterov, weight_decay, warmup_steps},
                        whole_batch_loss);
    if (!init.empty()) model.load_state_dict(pl::safetensors::load(init).tensors, true);

    pl::DataLoaderOptions lo;
    lo.batch_size = batch_size;
    lo.shuffle = !no_shuffle;
    pl::DataLoader train(d.train, lo);
    lo.shuffle = false;
    std::unique_ptr<pl::DataLoader> val;
    if (d.heldout) val = std::make_unique<pl::DataLoader>(d.heldout, lo);

    auto t0 = std::chrono::steady_clock::now();
    trainer.fit(model, train, val.get(), resume);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (trainer.interrupted()) {  // preempted (SIGTERM under SLURM): the checkpoint holds the run
      if (trainer.is_global_zero())
        std::printf("plrt-mlp: stopped by SIGTERM after %lld steps; resume with --resume %s/checkpoints/last\n",
                    static_cast<long long>(trainer.global_step()), trainer.log_dir().c_str());
      return 128 + SIGTERM;  // as a process the signal ended: the launcher sees a preempted job
    }

    if (trainer.is_global_zero()) {
      const auto& m = trainer.callback_metrics();
      char held[96] = "no validation ran (no held-out data, or no epoch finished)";
      if (m.count("val_acc") && m.count("val_loss"))
        std::snprintf(held, sizeof held, "held-out accuracy %.4f, loss %.4f", m.at("val_acc"), m.at("val_loss"));
      std::printf("plrt-mlp: %lld steps in %.2f s (%.1f steps/s); %s\n", static_cast<long long>(trainer.global_step()),
                  secs, static_cast<double>(trainer.global_step()) / secs, held);
      if (early && !early->stop_reason().empty())
        std::printf("plrt-mlp: early stopping after epoch %lld (%s)\n", static_cast<long long>(early->stopped_epoch()),
                    early->stop_reason().c_str());
      if (best && !best->best_model_path().empty())
        std::printf("plrt-mlp: best checkpoint %s (val_acc %.4f)\n", best->best_model_path().c_str(),
                    best->best_model_score());
      if (!save.empty()) {
        pl::safetensors::save(save, model.state_dict(), {{"format", "pt"}});
        std::printf("plrt-mlp: weights written to %s\n", save.c_str());
      }
      if (!report.empty()) {
        nlohmann::json j;
        j["steps"] = trainer.global_step();
        j["samples_trained"] = trainer.samples_trained();
        j["epoch"] = trainer.current_epoch();
        j["restart_count"] = trainer.restart_count();
        j["resumed_from"] = trainer.resumed_from();
        j["seconds"] = secs;
        j["world_size"] = trainer.world_size();
        j["strategy"] = trainer.job().strategy;
        j["metrics"] = m;
        j["precision"] = trainer.job().precision;
        j["effective_batch_size"] = trainer.effective_batch_size();
        j["replicas"] = trainer.num_replicas();
        j["loss_scale"] = trainer.loss_scale();
        j["skipped_steps"] = trainer.skipped_steps();
        j["optimizer_state_bytes"] = trainer.optimizer_state_bytes();
        if (early) j["early_stopping"] = {{"stopped_epoch", early->stopped_epoch()}, {"reason", early->stop_reason()}};
        if (best) j["best_model_path"] = best->best_model_path(), j["best_model_score"] = best->best_model_score();
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
        std::ofstream out(report);
        out << j.dump(2) << "\n";
        if (!out.flush()) throw pl::Error(PL_ERR_RUNTIME, "--report " + report + ": could not write the file");
      }
    }
    return 0;
  } catch (const pl::Error& e) {
    std::cerr << "plrt-mlp: error: " << e.what() << "\n";
    return pl::exit_code_for(e);
  } catch (const std::exception& e) {
    std::cerr << "plrt-mlp: error: " << e.what() << "\n";
    return pl::kExitFailure;
  }
}
