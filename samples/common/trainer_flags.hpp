// The Lightning Trainer knobs as command-line flags, shared by the samples (plrt-mlp,
// plrt-torch-cnn): accelerator, devices, strategy, precision, the loop limits, validation cadence,
// checkpointing, logging and the profiler, each with its Lightning name in kebab case.  Bad
// values are pl::Error naming the flag (exit code 2), found before any work.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <plrt/sdk/trainer.hpp>
#include <string>
#include <vector>

struct TrainerFlags {
  pl::TrainerOptions options;  // the flags' values land here (apply_trainer_flags)
  uint64_t seed = 42;          // --seed, once applied
  bool checkpointing = true;   // not --no-checkpoint
  // the flags' text, read by apply_trainer_flags
  std::string devices = "auto", seed_text = "42", clip_val = "0", every_seconds = "0";
  std::string limit_train = "1.0", limit_val = "1.0", val_every = "1.0", val_epochs = "1";
  std::vector<std::string> strategy_options;
  int64_t epochs = 5, max_steps = -1, min_epochs = 0;
  double timeout_s = 0;
  bool no_checkpoint = false, no_progress_bar = false, no_model_summary = false;
};

// Adds the flags to `app` (--epochs defaults to f.epochs as given).
void add_trainer_flags(CLI::App& app, TrainerFlags& f);
// After app.parse: checks the values and puts them into f.options.
void apply_trainer_flags(const CLI::App& app, TrainerFlags& f);
// app.parse with the samples' exit codes: -1 when parsed, else the code to exit with (0 after
// --help; 2 for a flag CLI11 refuses, not its own 105 to 114, which would read as a failure).
int parse_flags(CLI::App& app, int argc, char** argv, const std::string& program);
// After fit, rank 0's lines: a fit stopped by SIGTERM says how to resume (true: exit with
// 128 + SIGTERM, as a process the signal ended), else the steps, the time and the held-out values.
bool report_interrupted(pl::Trainer& trainer, const std::string& program);
void print_fit_summary(pl::Trainer& trainer, const std::string& program, double seconds);
// An output file of --save / --report, checked before training so that a bad path loses no work:
// its folder must exist and be writable, and the path must not be a folder.
void check_output_path(const char* flag, const std::string& path);
// The report most samples write (rank 0): steps, time, the job, callback_metrics, the strategy's
// statistics; `extra` is merged in.
void write_report(const std::string& path, pl::Trainer& trainer, double seconds, const nlohmann::json& extra);
