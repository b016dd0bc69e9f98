// plrt-torch-cnn: a libtorch CNN trained by pl::Trainer (a pl::torch::LightningModule), with
// plrt-mlp's command line: the Trainer's knobs (trainer_flags.hpp), --data / --val-data
// safetensors files (x: F32 [N, 64], the pixels of 8x8 images; y: I64 [N]), --report, --save,
// --resume.
//
//   scripts/get-digits /tmp/digits
//   plrun --strategy ddp --devices 2 -- plrt-torch-cnn --data /tmp/digits/digits.safetensors --epochs 15
//
// Exit codes as plrt-mlp's: 0 success, 2 bad input (before any work), 143 stopped by SIGTERM with
// a checkpoint, 1 anything else.
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <plrt/sdk/exit_code.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/sdk/trainer.hpp>

#include "classifier_data.hpp"
#include "cnn_module.hpp"
#include "trainer_flags.hpp"

int main(int argc, char** argv) {
  CLI::App app("plrt-torch-cnn: a libtorch CNN trained by pl::Trainer (Lightning's Trainer for C++)", "plrt-torch-cnn");
  std::string data, val_data, save, report, resume;
  int64_t batch_size = 32;
  double lr = 2e-3, heldout = 0.125;
  bool no_shuffle = false;
  TrainerFlags flags;
  flags.epochs = 15;
  app.add_option("--data", data, "safetensors file with x (F32 [N, 64]: 8x8 images) and y (I64 [N])")->required();
  app.add_option("--val-data", val_data,
                 "safetensors file of validation data (as --data's), instead of a held-out part of --data");
  app.add_option("--heldout", heldout,
                 "Fraction of --data held out for validation, rows drawn from --seed (--val-data: default 0)")
      ->capture_default_str();
  app.add_option("--batch-size", batch_size, "Samples per batch and process")->capture_default_str();
  app.add_option("--lr", lr, "Adam's learning rate")->capture_default_str();
  app.add_flag("--no-shuffle", no_shuffle, "Keep the training data in order");
  app.add_option("--save", save, "Write the trained weights here (safetensors, the module's PyTorch names)");
  app.add_option("--resume", resume,
                 "Resume from a checkpoint folder, or 'last': the newest under <root-dir>/lightning_logs");
  app.add_option("--report", report, "Write a JSON summary here (rank 0): metrics, steps/s, strategy statistics");
  add_trainer_flags(app, flags);
  if (const int code = parse_flags(app, argc, argv, "plrt-torch-cnn"); code >= 0) return code;

  try {
    apply_trainer_flags(app, flags);
    if (batch_size < 1)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--batch-size " + std::to_string(batch_size) + " must be >= 1");
    if (!(lr > 0)) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--lr " + std::to_string(lr) + " must be > 0");
    check_output_path("--save", save);
    check_output_path("--report", report);
    // The data before the Trainer: a bad file is bad input, found before any work.
    const FileDataSpec file{data, val_data, app.count("--heldout") || val_data.empty() ? heldout : 0.0, flags.seed, 0};
    const ClassifierData d = load_safetensors(file);
    if (d.features != 64)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "--data " + data + ": x has " + std::to_string(d.features) +
                                                   " features per row; plrt-torch-cnn reads 8x8 images (64)");
    pl::Trainer trainer(flags.options);  // seeds everything first: the initial weights follow --seed
    DigitsCnn model(d.classes, lr);

    pl::DataLoaderOptions lo;
    lo.batch_size = batch_size;
    lo.shuffle = !no_shuffle;
    pl::DataLoader train(d.train, lo);
    lo.shuffle = false;
    std::unique_ptr<pl::DataLoader> val;
    if (d.heldout) val = std::make_unique<pl::DataLoader>(d.heldout, lo);

    const auto t0 = std::chrono::steady_clock::now();
    trainer.fit(model, train, val.get(), resume);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (report_interrupted(trainer, "plrt-torch-cnn")) return 128 + SIGTERM;
    if (trainer.is_global_zero()) {
      print_fit_summary(trainer, "plrt-torch-cnn", secs);
      if (!save.empty()) {
        pl::safetensors::save(save, trainer.model()->state_dict(), {{"format", "pt"}});
        std::printf("plrt-torch-cnn: weights written to %s\n", save.c_str());
      }
      if (!report.empty()) write_report(report, trainer, secs, nlohmann::json::object());
    }
    return 0;
  } catch (const pl::Error& e) {
    std::cerr << "plrt-torch-cnn: error: " << e.what() << "\n";
    return pl::exit_code_for(e);
  } catch (const std::exception& e) {
    std::cerr << "plrt-torch-cnn: error: " << e.what() << "\n";
    return pl::kExitFailure;
  }
}
