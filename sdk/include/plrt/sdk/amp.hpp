// pl::amp: mixed precision (Lightning's precision="16-mixed" / "bf16-mixed").
//
// The trainer keeps the module's parameters in float32 (the master weights, which the optimizer
// and the strategy see) and turns autocast on around each step: the layers (pl::nn) then compute
// in the low-precision dtype — Linear casts its input and a copy of its weight, multiplies on the
// accelerator's f16/bf16 gemm (f32 accumulation), and writes its float32 gradients from the
// low-precision ones — while losses run in float32, as torch.autocast does.
//
// For float16 a dynamic loss scaler (torch.cuda.amp.GradScaler's algorithm) multiplies the loss
// gradient by `loss_scale()` so that small gradients survive f16; before the optimizer step the
// trainer unscales the gradients, skips the step when any is inf/NaN (and halves the scale), and
// doubles the scale after `growth_interval` clean steps.  bfloat16 has float32's range: no scaler.
//
// Autocast is per thread (as torch.autocast): dp's replica threads each set their own.
#pragma once

#include <plrt/sdk/module.hpp>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <vector>

namespace pl::amp {

// The calling thread's autocast dtype: PL_F16 or PL_BF16 while autocast is on, else
// PL_DTYPE_INVALID (layers compute in their parameters' dtype).
PL_DType compute_dtype();
// The factor a hand-written loss gradient must be multiplied by (nn::cross_entropy applies it):
// the scaler's scale under 16-mixed inside a training step, else 1.
double loss_scale();

// Sets the calling thread's autocast state for its lifetime, restoring the previous one after.
class Autocast {
 public:
  Autocast(PL_DType compute_dtype, double loss_scale = 1.0);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  PL_DType prev_dtype_;
  double prev_scale_;
};

// The precision named by Lightning's flag ("32-true", "16-mixed", "bf16-mixed", after the runtime
// normalised the old spellings): the compute dtype (PL_DTYPE_INVALID for 32-true) and whether a
// loss scaler runs.  Another name throws, listing the valid ones.
struct Precision {
  std::string name = "32-true";
  PL_DType compute_dtype = PL_DTYPE_INVALID;
  bool scaled = false;
  static Precision parse(const std::string& name);
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, as torch
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// torch.cuda.amp.GradScaler's dynamic loss scale, over the accelerator's unscale_check kernel.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});
  double scale() const { return scale_; }
  int64_t growth_tracker() const { return tracker_; }
  void load(double scale, int64_t growth_tracker);  // from a checkpoint (scale finite and > 0)
  // Unscales the written gradients (grad_is_zero false) of `params` by 1/scale in place and says
  // whether any was inf or NaN (one device flag, read back once).
  bool unscale(const std::vector<Parameter*>& params);
  // The same over elements [begin, end) of params[r.param]'s gradient for each range r, and only
  // there (the trainer passes its optimizer's parameters and grad_ranges: a sharded strategy leaves
  // the gradient elements outside its owned ranges unspecified).  Parameters that do not require
  // grad or whose gradient was not written are skipped; an index past params throws.
  bool unscale(const std::vector<Parameter*>& params, const std::vector<ParamRange>& ranges);
  // After a step: found_inf -> scale *= backoff, the tracker restarts; else the tracker counts
  // and the scale grows every growth_interval clean steps.
  void update(bool found_inf);
  int64_t skipped_steps() const { return skipped_; }

 private:
  GradScalerOptions o_;
  double scale_;
  int64_t tracker_ = 0;
  int64_t skipped_ = 0;
  Tensor flag_;  // f32 [1] on the gradients' device
};

}  // namespace pl::amp
