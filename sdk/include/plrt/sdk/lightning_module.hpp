// pl::LightningModule: a Module with Lightning's step hooks, optimizer configuration and
// logging.  There is no autograd: training_step runs forward AND backward (the layers' backward
// calls, see nn.hpp) and returns the loss; the trainer drives everything else (device placement,
// distributed sampling, gradient sync, optimizer steps, accumulation, checkpoints).
#pragma once

#include <plrt/sdk/data.hpp>
#include <plrt/sdk/module.hpp>
#include <plrt/sdk/optim.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pl {

class Trainer;

enum class Reduce { Mean, Sum, Min, Max };

struct LogOptions {
  // Defaults as Lightning's: in training_step on_step, elsewhere on_epoch.  With both, the names
  // get "_step" and "_epoch" suffixes.
  std::optional<bool> on_step;
  std::optional<bool> on_epoch;
  bool sync_dist = false;         // reduce across ranks (epoch values weighted by batch size)
  Reduce reduce_fx = Reduce::Mean;
  bool rank_zero_only = false;    // logged by rank 0 only; cannot be synced
  bool prog_bar = false;          // also shown on rank 0's console line
  int64_t batch_size = -1;        // epoch-mean weight; default: the current batch's size
};

class LightningModule : public Module {
 public:
  // Forward and backward on one batch (already on the module's device); returns the loss.
  virtual double training_step(const Batch& batch, int64_t batch_idx) = 0;
  virtual void validation_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  virtual void test_step(const Batch& batch, int64_t batch_idx) { (void)batch, (void)batch_idx; }
  virtual std::unique_ptr<Optimizer> configure_optimizers() = 0;

  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}

  // Lightning's self.log.  Outside a trainer it throws.
  void log(const std::string& name, double value, const LogOptions& options = {});
  // The tensor from every rank (same shape everywhere), in rank order; {t} when alone.
  std::vector<Tensor> all_gather(const Tensor& t);
  std::vector<double> all_gather(double value);

  bool is_global_zero() const;
  int global_rank() const;
  int world_size() const;
  int64_t current_epoch() const;
  int64_t global_step() const;
  Trainer* trainer() const { return trainer_; }

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
};

}  // namespace pl
