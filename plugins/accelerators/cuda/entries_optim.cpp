// sgd_step and adam_step: the cpu reference's checks and scalar arithmetic (in double, on the
// host), then one fused launch (kernels_optim.cu).
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "tensor_checks.hpp"

#include <cmath>
#include <string>

namespace plrt::cuda {
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

// A state tensor of `param`'s call: on the GPU, same dtype, count and device.
void check_state(const PL_Tensor* param, const PL_Tensor* t, const char* what, const char* op) {
  check_cuda_tensor(t, op, what);
  check_same_dtype(param, "param", t, what, op);
  check_same_numel(param, "param", t, what, op);
  check_same_device(param, "param", t, what, op);
}

}  // namespace

PL_Error* cuda_sgd_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* momentum_buf,
                        const PL_SgdParams* params, PL_Stream* stream) {
  return run(acc, [&] {
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
           "sgd_step: nesterov momentum requires momentum > 0 and dampening == 0 (got momentum " +
               num(params->momentum) + ", dampening " + num(params->dampening) + ")");

    check_cuda_tensor(param, op, "param");
    check_cuda_tensor(grad, op, "grad");
    require_float_dtype(param, "param", op);
    check_same_dtype(param, "param", grad, "grad", op);
    check_same_numel(param, "param", grad, "grad", op);
    check_same_device(param, "param", grad, "grad", op);
    const bool has_momentum = params->momentum != 0;
    if (has_momentum) {
      if (momentum_buf == nullptr)
        fail(PL_ERR_INVALID_ARGUMENT, "sgd_step: momentum_buf is NULL but momentum is " + num(params->momentum) +
                                          "; a momentum buffer is required when momentum != 0");
      check_state(param, momentum_buf, "momentum_buf", op);
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
    DeviceScope scope(op, *param, "param", stream);
    launch_sgd(scope.launch(), *param, *grad, has_momentum ? momentum_buf : nullptr, s);
  });
}

PL_Error* cuda_adam_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* exp_avg,
                         PL_Tensor* exp_avg_sq, const PL_AdamParams* params, PL_Stream* stream) {
  return run(acc, [&] {
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

    check_cuda_tensor(param, op, "param");
    check_cuda_tensor(grad, op, "grad");
    check_cuda_tensor(exp_avg, op, "exp_avg");
    check_cuda_tensor(exp_avg_sq, op, "exp_avg_sq");
    require_float_dtype(param, "param", op);
    check_same_dtype(param, "param", grad, "grad", op);
    check_same_dtype(param, "param", exp_avg, "exp_avg", op);
    check_same_dtype(param, "param", exp_avg_sq, "exp_avg_sq", op);
    check_same_numel(param, "param", grad, "grad", op);
    check_same_numel(param, "param", exp_avg, "exp_avg", op);
    check_same_numel(param, "param", exp_avg_sq, "exp_avg_sq", op);
    check_same_device(param, "param", grad, "grad", op);
    check_same_device(param, "param", exp_avg, "exp_avg", op);
    check_same_device(param, "param", exp_avg_sq, "exp_avg_sq", op);

    // The scalars exactly as the cpu reference computes them (std::pow and std::sqrt in double).
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
    DeviceScope scope(op, *param, "param", stream);
    launch_adam(scope.launch(), *param, *grad, *exp_avg, *exp_avg_sq, s);
  });
}

}  // namespace plrt::cuda
