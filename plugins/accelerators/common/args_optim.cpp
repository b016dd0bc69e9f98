// The argument rules of sgd_step and adam_step, and the per-call scalars every accelerator derives
// from the checked parameters (in double, once, so that they are the same bits everywhere; see
// kernel_args.hpp).
#include <cmath>
#include <string>

#include "kernel_args.hpp"

namespace plrt::kernel_args {
namespace {

// A finite scalar >= 0 (lr, eps, momentum, weight_decay).
void require_nonneg(double v, const char* op, const char* name) {
  if (!(std::isfinite(v) && v >= 0))
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": " + name + " " + num(v) + " is invalid; valid: a finite number >= 0");
}

void require_beta(double v, const char* name) {
  if (!(v >= 0 && v < 1))
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string("adam_step: ") + name + " " + num(v) + " is invalid; valid: 0 <= " + name + " < 1");
}

// An optimizer state tensor of `param`'s call: same device type, dtype, count and device.
void check_state(Target target, const PL_Tensor* param, const PL_Tensor* t, const char* what, const char* op) {
  check_tensor_on(target, t, op, what);
  check_same_dtype(param, "param", t, what, op);
  check_same_numel(param, "param", t, what, op);
  check_same_device(target, param, "param", t, what, op);
}

}  // namespace

SgdScalars sgd_step(Target target, const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* momentum_buf,
                    const PL_SgdParams* params) {
  constexpr const char* op = "sgd_step";
  if (params == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "sgd_step: params is NULL");
  if (params->struct_size < PL_STRUCT_SIZE(PL_SgdParams, first_step))
    fail(PL_ERR_VERSION, "sgd_step: PL_SgdParams.struct_size " + std::to_string(params->struct_size) +
                             " is smaller than the v1 size " +
                             std::to_string(PL_STRUCT_SIZE(PL_SgdParams, first_step)));
  require_nonneg(params->lr, op, "lr");
  require_nonneg(params->momentum, op, "momentum");
  require_nonneg(params->weight_decay, op, "weight_decay");
  if (!std::isfinite(params->dampening))
    fail(PL_ERR_INVALID_ARGUMENT,
         "sgd_step: dampening " + num(params->dampening) + " is invalid; valid: a finite number");
  if (params->nesterov && (params->momentum <= 0 || params->dampening != 0))
    fail(PL_ERR_INVALID_ARGUMENT,
         "sgd_step: nesterov momentum requires momentum > 0 and dampening == 0 (got momentum " + num(params->momentum) +
             ", dampening " + num(params->dampening) + ")");

  check_tensor_on(target, param, op, "param");
  check_tensor_on(target, grad, op, "grad");
  require_float_dtype(param, op, "param");
  check_same_dtype(param, "param", grad, "grad", op);
  check_same_numel(param, "param", grad, "grad", op);
  check_same_device(target, param, "param", grad, "grad", op);
  const bool has_momentum = params->momentum != 0;
  if (has_momentum) {
    if (momentum_buf == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, "sgd_step: momentum_buf is NULL but momentum is " + num(params->momentum) +
                                        "; a momentum buffer is required when momentum != 0");
    check_state(target, param, momentum_buf, "momentum_buf", op);
  }

  SgdScalars s{};
  s.lr = params->lr;
  s.momentum = params->momentum;
  s.one_minus_dampening = 1.0 - params->dampening;
  s.weight_decay = params->weight_decay;
  s.has_wd = params->weight_decay != 0;
  s.has_momentum = has_momentum;
  s.nesterov = params->nesterov != 0;
  s.first_step = params->first_step != 0;
  return s;
}

AdamScalars adam_step(Target target, const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* exp_avg,
                      const PL_Tensor* exp_avg_sq, const PL_AdamParams* params) {
  constexpr const char* op = "adam_step";
  if (params == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "adam_step: params is NULL");
  if (params->struct_size < PL_STRUCT_SIZE(PL_AdamParams, decoupled_weight_decay))
    fail(PL_ERR_VERSION, "adam_step: PL_AdamParams.struct_size " + std::to_string(params->struct_size) +
                             " is smaller than the v1 size " +
                             std::to_string(PL_STRUCT_SIZE(PL_AdamParams, decoupled_weight_decay)));
  require_nonneg(params->lr, op, "lr");
  require_nonneg(params->eps, op, "eps");
  require_nonneg(params->weight_decay, op, "weight_decay");
  require_beta(params->beta1, "beta1");
  require_beta(params->beta2, "beta2");
  if (params->step < 1)
    fail(PL_ERR_INVALID_ARGUMENT, "adam_step: step " + std::to_string(params->step) +
                                      " is invalid; valid: step >= 1 (it counts from 1, for bias correction)");

  check_tensor_on(target, param, op, "param");
  check_tensor_on(target, grad, op, "grad");
  check_tensor_on(target, exp_avg, op, "exp_avg");
  check_tensor_on(target, exp_avg_sq, op, "exp_avg_sq");
  require_float_dtype(param, op, "param");
  check_same_dtype(param, "param", grad, "grad", op);
  check_same_dtype(param, "param", exp_avg, "exp_avg", op);
  check_same_dtype(param, "param", exp_avg_sq, "exp_avg_sq", op);
  check_same_numel(param, "param", grad, "grad", op);
  check_same_numel(param, "param", exp_avg, "exp_avg", op);
  check_same_numel(param, "param", exp_avg_sq, "exp_avg_sq", op);
  check_same_device(target, param, "param", grad, "grad", op);
  check_same_device(target, param, "param", exp_avg, "exp_avg", op);
  check_same_device(target, param, "param", exp_avg_sq, "exp_avg_sq", op);

  AdamScalars s{};
  const double step = static_cast<double>(params->step);
  const double bc1 = 1.0 - std::pow(params->beta1, step);
  const double bc2 = 1.0 - std::pow(params->beta2, step);
  s.beta1 = params->beta1;
  s.beta2 = params->beta2;
  s.one_minus_beta1 = 1.0 - params->beta1;
  s.one_minus_beta2 = 1.0 - params->beta2;
  s.eps = params->eps;
  s.weight_decay = params->weight_decay;
  s.step_size = params->lr / bc1;
  s.bc2_sqrt = std::sqrt(bc2);
  s.decay = 1.0 - params->lr * params->weight_decay;
  s.decoupled = params->decoupled_weight_decay != 0;
  s.has_wd = params->weight_decay != 0;
  s.freeze_v = PL_HAS_FIELD(PL_AdamParams, params, freeze_exp_avg_sq) && params->freeze_exp_avg_sq != 0;
  s.grad_is_m = PL_HAS_FIELD(PL_AdamParams, params, grad_is_exp_avg) && params->grad_is_exp_avg != 0;
  if (s.grad_is_m && s.decoupled)
    fail(PL_ERR_INVALID_ARGUMENT,
         "adam_step: grad_is_exp_avg with decoupled_weight_decay is invalid: the gradient "
         "holds the first moment, weight decay included (QAdam), so set one or the other");
  return s;
}

}  // namespace plrt::kernel_args
