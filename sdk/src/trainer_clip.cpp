// Lightning's gradient clipping (TrainerOptions::gradient_clip_val / gradient_clip_algorithm) at the
// accumulation boundary, after 16-mixed's unscale and the skip agreement, before the optimizer step:
//
//   norm  (torch.nn.utils.clip_grad_norm_, norm_type 2, error_if_nonfinite False):
//           sq = sum over grad_ranges of the gradient elements' squares (accelerator sum_squares into
//                one float64 on the device, read back once); a sharded strategy (ABI 1.5) adds the
//                ranks' sq with one reduce(SUM), so every rank sees the global norm
//           coef = clip_val / (sqrt(sq) + 1e-6); coef < 1 (or NaN: a non-finite norm) -> every
//           gradient element in grad_ranges *= coef (accelerator scale)
//   value (torch.nn.utils.clip_grad_value_): every gradient element in grad_ranges clamped to
//           [-clip_val, clip_val] (accelerator clamp)
//
// grad_ranges are the optimizer's parameters that require grad, whole, or under a sharded strategy
// the ranges this rank owns (the rest of each gradient is unspecified there); a parameter whose
// gradient was not written this step is left out, as the optimizer skips it.
#include <cmath>

#include "trainer_impl.hpp"

namespace pl {

void Trainer::Impl::clip_gradients() {
  const double clip = o.gradient_clip_val;
  if (!(clip > 0)) return;
  const plrt::sdk::Profiler::Span timed(&profiler, "clip_gradients");
  // The gradients' views (a member: no allocation per step); all on one device (the root
  // module's), through its accelerator.
  std::vector<PL_Tensor>& views = clip_views;
  views.clear();
  const Accelerator* gacc = &acc;
  PL_Device on = device;
  for (const ParamRange& r : grad_ranges) {
    const Parameter& p = *optimizer->params()[r.param];
    if (!p.requires_grad || p.grad_is_zero || !p.grad.defined() || r.begin >= r.end) continue;
    if (!p.grad.accelerator().defined())
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "gradient clipping: a gradient is a plain host tensor; the trainer "
                  "places the module's tensors with its accelerator");
    const PL_Device d = p.grad.device();
    if (!views.empty() && (d.type != on.type || d.index != on.index))
      throw Error(PL_ERR_UNSUPPORTED, "gradient clipping: the gradients are on several devices");
    on = d;
    gacc = &p.grad.accelerator();
    views.push_back(plrt::sdk::flat_range(p.grad, r.begin, r.end));
  }
  if (o.gradient_clip_algorithm == "value") {
    for (PL_Tensor& v : views) gacc->clamp(v, -clip, clip);
    return;
  }
  double sq = 0;
  if (!views.empty()) {
    if (!clip_sum.defined() || clip_sum.accelerator() != *gacc || clip_sum.device().type != on.type ||
        clip_sum.device().index != on.index)
      clip_sum = Tensor::zeros(*gacc, on, {1}, PL_F64);
    PL_Tensor s = clip_sum.view();
    gacc->fill(s, 0.0);
    for (const PL_Tensor& v : views) gacc->sum_squares(v, s);
    // The one synchronisation: a blocking copy of the sum to the host (no allocation).
    gacc->copy(&sq, PL_Device{PL_DEVICE_CPU, 0}, clip_sum.data(), on, sizeof sq);
  }
  if (sharded) {  // every rank calls it, with or without gradients of its own
    PL_Tensor t{};
    t.struct_size = sizeof t;
    t.data = &sq;
    t.dtype = PL_F64;
    t.device = PL_Device{PL_DEVICE_CPU, 0};
    t.numel = 1;
    t.ndim = 1;
    t.shape[0] = 1;
    strategy.reduce(t, PL_REDUCE_SUM);
  }
  const double total = std::sqrt(sq);
  const double coef = clip / (total + 1e-6);
  if (coef >= 1) return;  // NaN falls through: torch multiplies by the NaN coefficient
  for (PL_Tensor& v : views) gacc->scale(v, coef);
}

}  // namespace pl
