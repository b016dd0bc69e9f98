// pl::amp: the thread-local autocast state, precision names, and the dynamic loss scaler.
#include <cmath>
#include <plrt/sdk/amp.hpp>
#include <string>

#include "sdk_internal.hpp"

namespace pl::amp {

namespace {
thread_local PL_DType t_dtype = PL_DTYPE_INVALID;
thread_local double t_scale = 1.0;
}  // namespace

PL_DType compute_dtype() { return t_dtype; }
double loss_scale() { return t_scale; }

Autocast::Autocast(PL_DType compute_dtype, double loss_scale) : prev_dtype_(t_dtype), prev_scale_(t_scale) {
  if (compute_dtype != PL_DTYPE_INVALID && compute_dtype != PL_F16 && compute_dtype != PL_BF16)
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string("amp::Autocast: compute dtype ") + pl_dtype_name(compute_dtype) +
                                             " is not a low-precision float; use float16 or bfloat16");
  if (!std::isfinite(loss_scale) || loss_scale <= 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "amp::Autocast: loss scale " + std::to_string(loss_scale) + " must be finite and > 0");
  t_dtype = compute_dtype;
  t_scale = loss_scale;
}

Autocast::~Autocast() {
  t_dtype = prev_dtype_;
  t_scale = prev_scale_;
}

Precision Precision::parse(const std::string& name) {
  Precision p;
  p.name = name;
  if (name == "32-true" || name == "32") {
    p.name = "32-true";
  } else if (name == "16-mixed" || name == "16") {
    p.name = "16-mixed", p.compute_dtype = PL_F16, p.scaled = true;
  } else if (name == "bf16-mixed" || name == "bf16") {
    p.name = "bf16-mixed", p.compute_dtype = PL_BF16;
  } else {
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "precision='" + name + "' is not supported; valid: 32-true, 16-mixed, bf16-mixed (or 32, 16, bf16)");
  }
  return p;
}

GradScaler::GradScaler(GradScalerOptions o) : o_(o), scale_(o.init_scale) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error(PL_ERR_INVALID_ARGUMENT, "GradScaler: " + what);
  };
  need(std::isfinite(o.init_scale) && o.init_scale > 0,
       "init_scale " + std::to_string(o.init_scale) + " must be finite and > 0");
  need(std::isfinite(o.growth_factor) && o.growth_factor > 1,
       "growth_factor " + std::to_string(o.growth_factor) + " must be > 1");
  need(o.backoff_factor > 0 && o.backoff_factor < 1,
       "backoff_factor " + std::to_string(o.backoff_factor) + " must be in (0, 1)");
  need(o.growth_interval >= 1, "growth_interval " + std::to_string(o.growth_interval) + " must be >= 1");
}

void GradScaler::load(double scale, int64_t growth_tracker) {
  if (!std::isfinite(scale) || scale <= 0 || growth_tracker < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "GradScaler::load: scale " + std::to_string(scale) + " and growth tracker " +
                                             std::to_string(growth_tracker) + " must be finite > 0 and >= 0");
  scale_ = scale;
  tracker_ = growth_tracker;
}

bool GradScaler::unscale(const std::vector<Parameter*>& params) {
  std::vector<ParamRange> whole;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i]->grad.defined()) whole.push_back({i, 0, params[i]->grad.numel()});
  return unscale(params, whole);
}

bool GradScaler::unscale(const std::vector<Parameter*>& params, const std::vector<ParamRange>& ranges) {
  const double inv = 1.0 / scale_;
  bool any = false;
  for (const ParamRange& r : ranges) {
    if (r.param >= params.size())
      throw Error(PL_ERR_INVALID_ARGUMENT, "GradScaler::unscale: a range names parameter " + std::to_string(r.param) +
                                               " of " + std::to_string(params.size()));
    Parameter* p = params[r.param];
    if (!p->requires_grad || p->grad_is_zero || !p->grad.defined() || r.begin >= r.end) continue;
    if (r.begin < 0 || r.end > p->grad.numel())
      throw Error(PL_ERR_INVALID_ARGUMENT, "GradScaler::unscale: range [" + std::to_string(r.begin) + ", " +
                                               std::to_string(r.end) + ") is outside parameter " +
                                               std::to_string(r.param) + "'s " + std::to_string(p->grad.numel()) +
                                               " gradient elements");
    const Accelerator& acc = p->grad.accelerator();
    if (!acc.defined())
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "GradScaler::unscale: a gradient is a plain host tensor; place the module "
                  "with module.to(accelerator, device) first");
    if (!flag_.defined() || flag_.accelerator() != acc || flag_.device().type != p->grad.device().type ||
        flag_.device().index != p->grad.device().index) {
      if (any) throw Error(PL_ERR_UNSUPPORTED, "GradScaler::unscale: gradients on several devices; unscale per device");
      flag_ = Tensor::zeros(acc, p->grad.device(), {1}, PL_F32);
    }
    if (!any) {
      PL_Tensor fv = flag_.view();
      acc.fill(fv, 0.0);
      any = true;
    }
    PL_Tensor gv = plrt::sdk::flat_range(p->grad, r.begin, r.end), fv = flag_.view();
    acc.unscale_check(gv, inv, fv);
  }
  return any && flag_.to_vector<float>()[0] != 0.0f;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= o_.backoff_factor;
    tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++tracker_ >= o_.growth_interval) {
    const double grown = scale_ * o_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;  // torch keeps the old scale when growing would overflow
    tracker_ = 0;
  }
}

}  // namespace pl::amp
