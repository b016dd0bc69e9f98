// pl::QAdam (optim.hpp): Adam through its warmup, then the second moment frozen; with a strategy
// that averages the first moment (bagua's qadam), the gradient carries m_i out and m̄ back in.
#include <cmath>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/optim.hpp>

#include "sdk_internal.hpp"

namespace pl {

namespace {

AdamOptions adam_part(const QAdamOptions& o) {
  if (o.warmup_steps < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "QAdam: warmup_steps " + std::to_string(o.warmup_steps) +
                                             " is invalid; it must be >= 0 (steps run as Adam first; default 100)");
  return o;  // Adam's part
}

}  // namespace

QAdam::QAdam(std::vector<Parameter*> params, QAdamOptions o)
    : Adam(std::move(params), adam_part(o), false), warmup_(o.warmup_steps) {}

std::vector<std::pair<std::string, std::string>> QAdam::hyperparameters() const {
  auto h = Adam::hyperparameters();
  h.emplace_back("warmup_steps", std::to_string(warmup_));
  return h;
}

void QAdam::adjust(PL_AdamParams& ap, size_t i) const {
  (void)i;
  if (ap.step <= warmup_) return;  // Adam
  ap.freeze_exp_avg_sq = 1;
  ap.grad_is_exp_avg = first_moment_in_grads_ ? 1 : 0;
}

void QAdam::form_first_moment(size_t i, double loss_scale) {
  if (i >= params_.size())
    throw Error(PL_ERR_INVALID_ARGUMENT, "QAdam: form_first_moment: parameter index " + std::to_string(i) +
                                             " is out of range; the optimizer has " + std::to_string(params_.size()));
  if (!past_warmup(i)) return;
  Parameter& p = *params_[i];
  if (!p.requires_grad || !p.grad.defined()) return;
  const Accelerator& acc = accelerator_of(i);
  const AdamOptions& o = adam_options();
  PL_Tensor g = p.grad.view();
  if (p.grad_is_zero) acc.fill(g, 0.0);  // not written in this step: a zero gradient
  acc.scale(g, 1.0 - o.beta1);
  if (o.weight_decay != 0) acc.axpy(g, (1.0 - o.beta1) * o.weight_decay * loss_scale, p.value.view());
  const Tensor& m = exp_avg_of(i);
  if (m.defined()) acc.axpy(g, o.beta1 * loss_scale, m.view());
  p.grad_is_zero = false;
}

}  // namespace pl
