// Learning-rate schedulers with PyTorch's names and values (torch.optim.lr_scheduler, 1.13):
// StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR (a warm-up), OneCycleLR, and
// ReduceLROnPlateau on a monitored value.  Each drives one pl::Optimizer's learning rate (plrt's
// optimizers have one parameter group).
//
// As in PyTorch, making a scheduler is its step 0: it sets the optimizer's learning rate to the
// schedule's first value (LinearLR: lr * start_factor; OneCycleLR: max_lr / div_factor), and
// every step() afterwards moves one period on (an epoch or an optimizer step: the Trainer's
// `interval`).  The chainable schedulers compute the next value from the optimizer's current one
// with PyTorch's own recurrences (not the closed forms), so a run's values equal PyTorch's bit for
// bit in double precision, drift included.  state()/load_state() carry what a checkpoint needs.
#pragma once

#include <cstdint>
#include <map>
#include <plrt/sdk/optim.hpp>
#include <string>
#include <vector>

namespace pl {

class LRScheduler {
 public:
  virtual ~LRScheduler();
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual std::string name() const = 0;  // "StepLR", ...
  // One period on: last_epoch() + 1, and the optimizer's lr set to the schedule's value there.
  void step();
  double last_lr() const { return last_lr_; }         // what the last step set (PyTorch get_last_lr()[0])
  int64_t last_epoch() const { return last_epoch_; }  // the periods stepped (0 after construction)
  double base_lr() const { return base_lr_; }         // the optimizer's lr when the scheduler was made
  Optimizer& optimizer() const { return opt_; }

  // For checkpoints: "last_epoch", "base_lr", "last_lr" and the scheduler's own; load_state checks
  // every name it needs before changing anything (else pl::Error naming it) and puts last_lr back
  // into the optimizer.
  virtual std::map<std::string, double> state() const;
  virtual void load_state(const std::map<std::string, double>& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Step 0; the constructor of the most derived class calls it last (it calls next_lr).
  void initial_step();
  // PyTorch's get_lr(): the lr at last_epoch(), from the optimizer's current lr.
  virtual double next_lr(double current_lr) = 0;

  Optimizer& opt_;
  double base_lr_;
  int64_t last_epoch_ = -1;
  double last_lr_ = 0;
};

// lr * gamma every step_size periods.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);  // step_size >= 1, gamma > 0
  std::string name() const override { return "StepLR"; }

 private:
  double next_lr(double current_lr) override;
  int64_t step_size_;
  double gamma_;
};

// lr * gamma at each milestone (a milestone named twice multiplies by gamma^2, as PyTorch's Counter).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);  // milestones >= 1
  std::string name() const override { return "MultiStepLR"; }

 private:
  double next_lr(double current_lr) override;
  std::map<int64_t, int> milestones_;
  double gamma_;
};

// lr * gamma every period.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);  // gamma > 0
  std::string name() const override { return "ExponentialLR"; }

 private:
  double next_lr(double current_lr) override;
  double gamma_;
};

// From the base lr down to eta_min along half a cosine over t_max periods (and back up after, as
// PyTorch's recurrence does without restarts).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0);  // t_max >= 1, eta_min >= 0
  std::string name() const override { return "CosineAnnealingLR"; }

 private:
  double next_lr(double current_lr) override;
  int64_t t_max_;
  double eta_min_;
};

// A linear warm-up: lr * start_factor at step 0 to lr * end_factor after total_iters periods.
class LinearLR : public LRScheduler {
 public:
  // 0 < start_factor <= 1, 0 <= end_factor <= 1, total_iters >= 1.
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 private:
  double next_lr(double current_lr) override;
  double start_, end_;
  int64_t total_iters_;
};

struct OneCycleOptions {
  double max_lr = 0;                    // > 0 (required)
  int64_t total_steps = 0;              // >= 1 (required): the optimizer steps of the whole run
  double pct_start = 0.3;               // in [0, 1]: the share of the rise
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  bool cycle_momentum = true;           // needs an optimizer with momentum (SGD) or beta1 (Adam)
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25;         // initial lr = max_lr / div_factor (> 0)
  double final_div_factor = 1e4;  // min lr = initial lr / final_div_factor (> 0)
  bool three_phase = false;
};

// Leslie Smith's 1cycle policy, per optimizer step: up from max_lr/div_factor to max_lr over
// pct_start of the steps, then down to the minimum (three_phase: back to the initial lr first),
// with the momentum cycling the other way.  A step past total_steps throws, as PyTorch does.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleOptions options);
  std::string name() const override { return "OneCycleLR"; }
  double last_momentum() const { return last_momentum_; }  // what the last step set (cycle_momentum)

 private:
  double next_lr(double current_lr) override;
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  // indices into the values below
  };
  OneCycleOptions o_;
  double values_lr_[3];        // initial, max, min
  double values_momentum_[2];  // max, base
  std::vector<Phase> phases_;
  double last_momentum_ = 0;
};

struct ReduceLROnPlateauOptions {
  std::string mode = "min";            // "min" or "max": whether a smaller or a larger monitored value is better
  double factor = 0.1;                 // in (0, 1): new lr = lr * factor
  int64_t patience = 10;               // >= 0: periods without improvement before reducing
  double threshold = 1e-4;             // >= 0
  std::string threshold_mode = "rel";  // "rel" or "abs"
  int64_t cooldown = 0;                // >= 0: periods after a reduction when nothing counts
  double min_lr = 0;                   // >= 0
  double eps = 1e-8;                   // >= 0: a change smaller than this is not made
};

// Reduces the lr by `factor` once the monitored value has not improved for `patience` periods.
// Not a chainable schedule: step(value) takes the value (the Trainer passes the logged `monitor`).
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  std::string name() const { return "ReduceLROnPlateau"; }
  void step(double value);  // a NaN value throws, naming it
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_; }
  int64_t last_epoch() const { return last_epoch_; }
  double last_lr() const { return opt_.lr(); }
  Optimizer& optimizer() const { return opt_; }
  std::map<std::string, double> state() const;  // last_epoch, best, num_bad_epochs, cooldown_counter
  void load_state(const std::map<std::string, double>& state);

 private:
  bool better(double value) const;
  Optimizer& opt_;
  ReduceLROnPlateauOptions o_;
  double best_;
  int64_t num_bad_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace pl
