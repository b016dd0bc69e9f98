// pl::ModelSummary: Lightning's ModelSummary callback.  At fit's start rank 0 logs (info) a table
// of the module's submodules down to max_depth (1: its direct children, as Lightning's default;
// -1: every depth; 0: no table), each with its dotted name, type and parameter count, then the
// trainable, non-trainable and total parameter counts and the parameters' size in MB, in
// Lightning's format:
//
//     | Name | Type   | Params
//   ------------------------------
//   0 | fc1  | Linear | 200 K
//   1 | fc2  | Linear | 2.6 K
//   ------------------------------
//   203 K     Trainable params
//   0         Non-trainable params
//   203 K     Total params
//   0.813     Total estimated model params size (MB)
//
// The Trainer adds one (max_depth 1) unless TrainerOptions::enable_model_summary is false
// (PL_TRAINER_ENABLE_MODEL_SUMMARY=0, plrt-mlp --no-model-summary); one in the callbacks replaces it.
#pragma once

#include <cstdint>
#include <plrt/sdk/callback.hpp>
#include <plrt/sdk/trainer_model.hpp>
#include <string>
#include <vector>

namespace pl {

class Module;

class ModelSummary : public Callback {
 public:
  // max_depth >= -1, else pl::Error naming it.
  explicit ModelSummary(int max_depth = 1);
  int max_depth() const { return max_depth_; }

  void on_fit_start(Trainer& trainer, LightningBase& module) override;

  // The table for a model (what on_fit_start logs: the trainer's model), or for a module tree of
  // plrt's layers; and Lightning's human-readable count ("200 K", "1.3 M", "12  ").
  static std::string table(TrainerModel& model, int max_depth = 1);
  static std::string table(Module& module, int max_depth = 1);
  // A module tree's rows of the table (its submodules down to max_depth).
  static std::vector<TrainerModel::Submodule> submodules(Module& module, int max_depth);
  static std::string readable_count(int64_t n);

 private:
  static std::string format(const std::vector<TrainerModel::Submodule>& rows,
                            const std::vector<std::pair<std::string, Parameter*>>& params);
  int max_depth_;
};

}  // namespace pl
