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

#include "classifier_data.hpp"
#include "mlp_module.hpp"
#include "trainer_flags.hpp"

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
  int64_t batch_size = 64, early_patience = 0, top_k = 0;
  double lr = 0.05, momentum = 0.9, heldout = 0.125, weight_decay = -1;
  int64_t warmup_steps = 100;
  bool nesterov = false;
  bool no_shuffle = false;
  SyntheticSpec synth;
  TrainerFlags flags;
  pl::TrainerOptions& topt = flags.options;
  app.add_option("--data", data,
                 "safetensors file with x (F32 [N, D]) and y (I64 [N]), trained on in file order (with "
                 "--no-shuffle); default: built-in synthetic data");
  app.add_option("--val-data", val_data,
                 "safetensors file of validation data (as --data's), instead of a held-out part of --data");
  app.add_option("--hidden", hidden, "Hidden layer widths, e.g. 256,128 (or none)")->capture_default_str();
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
  bool whole_batch_loss = false;
  app.add_flag("--whole-batch-loss", whole_batch_loss,
               "dp/ddp2: compute the loss over the whole batch in training_step_end (two-phase step)");
  app.add_option("--early-stopping", early_patience,
                 "Stop when val_loss has not improved for this many epochs (EarlyStopping; 0: off)")
      ->capture_default_str();
  app.add_option("--save-top-k", top_k,
                 "Keep the k checkpoints of best val_acc in checkpoints/ (ModelCheckpoint; 0: off, -1: all)")
      ->capture_default_str();
  app.add_option("--report", report, "Write a JSON summary here (rank 0): metrics, steps/s, strategy statistics");
  add_trainer_flags(app, flags);
  if (const int code = parse_flags(app, argc, argv, "plrt-mlp"); code >= 0) return code;

  try {
    apply_trainer_flags(app, flags);
    const uint64_t seed = flags.seed;
    const bool no_checkpoint = !flags.checkpointing;
    if (batch_size < 1)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--batch-size " + std::to_string(batch_size) + " must be >= 1");
    if (!(lr > 0)) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--lr " + std::to_string(lr) + " must be > 0");
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
    ClassifierData d = data.empty() ? make_synthetic(synth, heldout) : load_safetensors(file);
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
    if (report_interrupted(trainer, "plrt-mlp")) return 128 + SIGTERM;

    if (trainer.is_global_zero()) {
      print_fit_summary(trainer, "plrt-mlp", secs);
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
        nlohmann::json j = nlohmann::json::object();
        if (early) j["early_stopping"] = {{"stopped_epoch", early->stopped_epoch()}, {"reason", early->stop_reason()}};
        if (best) j["best_model_path"] = best->best_model_path(), j["best_model_score"] = best->best_model_score();
        write_report(report, trainer, secs, j);
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
