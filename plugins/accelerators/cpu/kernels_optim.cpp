// sgd_step and adam_step: torch.optim.SGD and torch.optim.Adam/AdamW on the CPU (see kernels.hpp).
#include "kernels.hpp"
#include "kernels_detail.hpp"

#include <cmath>
#include <string>

namespace plrt::cpu {
namespace {

using namespace detail;

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

struct SgdScalars {
  double lr, momentum, one_minus_dampening, weight_decay;
  bool has_wd, has_momentum, nesterov, first_step;
};

template <class Tr>
void sgd_loop(typename Tr::Storage* p, const typename Tr::Storage* g, typename Tr::Storage* buf,
              int64_t n, const SgdScalars& s) {
  using C = typename Tr::C;
  const C lr = static_cast<C>(s.lr);
  const C mom = static_cast<C>(s.momentum);
  const C damp1 = static_cast<C>(s.one_minus_dampening);
  const C wd = static_cast<C>(s.weight_decay);
  const bool has_wd = s.has_wd, has_momentum = s.has_momentum, first = s.first_step, nesterov = s.nesterov;
  for (int64_t i = 0; i < n; ++i) {
    const C pi = Tr::load(p[i]);
    C d = Tr::load(g[i]);
    if (has_wd) d = d + wd * pi;
    if (has_momentum) {
      const C b = first ? d : mom * Tr::load(buf[i]) + damp1 * d;
      buf[i] = Tr::store(b);
      d = nesterov ? d + mom * b : b;
    }
    p[i] = Tr::store(pi - lr * d);
  }
}

struct AdamScalars {
  double beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
  double step_size, bc2_sqrt, decay;
  bool decoupled, has_wd;
};

template <class Tr>
void adam_loop(typename Tr::Storage* p, const typename Tr::Storage* g, typename Tr::Storage* m,
               typename Tr::Storage* v, int64_t n, const AdamScalars& s) {
  using C = typename Tr::C;
  const C b1 = static_cast<C>(s.beta1);
  const C b2 = static_cast<C>(s.beta2);
  const C omb1 = static_cast<C>(s.one_minus_beta1);
  const C omb2 = static_cast<C>(s.one_minus_beta2);
  const C eps = static_cast<C>(s.eps);
  const C wd = static_cast<C>(s.weight_decay);
  const C step_size = static_cast<C>(s.step_size);
  const C bc2_sqrt = static_cast<C>(s.bc2_sqrt);
  const C decay = static_cast<C>(s.decay);
  const bool decoupled = s.decoupled, has_wd = s.has_wd;  // locals: the stores cannot alias them
  for (int64_t i = 0; i < n; ++i) {
    C pi = Tr::load(p[i]);
    C gi = Tr::load(g[i]);
    if (decoupled) {
      if (has_wd) pi = pi * decay;
    } else if (has_wd) {
      gi = gi + wd * pi;
    }
    const C mi = b1 * Tr::load(m[i]) + omb1 * gi;
    const C vi = b2 * Tr::load(v[i]) + (omb2 * gi) * gi;
    m[i] = Tr::store(mi);
    v[i] = Tr::store(vi);
    const C denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = Tr::store(pi - step_size * (mi / denom));
  }
}

}  // namespace

void sgd_step(const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* momentum_buf,
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
    fail(PL_ERR_INVALID_ARGUMENT, "sgd_step: dampening " + num(params->dampening) + " is invalid; valid: a finite number");
  if (params->nesterov && (params->momentum <= 0 || params->dampening != 0))
    fail(PL_ERR_INVALID_ARGUMENT, "sgd_step: nesterov momentum requires momentum > 0 and dampening == 0 (got momentum " +
                                      num(params->momentum) + ", dampening " + num(params->dampening) + ")");

  check_cpu_tensor(param, op, "param");
  check_cpu_tensor(grad, op, "grad");
  require_float_dtype(param, "param", op);
  check_same_dtype(param, "param", grad, "grad", op);
  check_same_numel(param, "param", grad, "grad", op);
  const bool has_momentum = params->momentum != 0;
  if (has_momentum) {
    if (momentum_buf == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, "sgd_step: momentum_buf is NULL but momentum is " + num(params->momentum) +
                                        "; a momentum buffer is required when momentum != 0");
    check_cpu_tensor(momentum_buf, op, "momentum_buf");
    check_same_dtype(param, "param", momentum_buf, "momentum_buf", op);
    check_same_numel(param, "param", momentum_buf, "momentum_buf", op);
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
  dispatch_float(param->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    sgd_loop<Tr>(data_of<Tr>(param), data_of<Tr>(grad), has_momentum ? data_of<Tr>(momentum_buf) : nullptr,
                 param->numel, s);
  });
}

void adam_step(const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* exp_avg,
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

  check_cpu_tensor(param, op, "param");
  check_cpu_tensor(grad, op, "grad");
  check_cpu_tensor(exp_avg, op, "exp_avg");
  check_cpu_tensor(exp_avg_sq, op, "exp_avg_sq");
  require_float_dtype(param, "param", op);
  check_same_dtype(param, "param", grad, "grad", op);
  check_same_dtype(param, "param", exp_avg, "exp_avg", op);
  check_same_dtype(param, "param", exp_avg_sq, "exp_avg_sq", op);
  check_same_numel(param, "param", grad, "grad", op);
  check_same_numel(param, "param", exp_avg, "exp_avg", op);
  check_same_numel(param, "param", exp_avg_sq, "exp_avg_sq", op);

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
  dispatch_float(param->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    adam_loop<Tr>(data_of<Tr>(param), data_of<Tr>(grad), data_of<Tr>(exp_avg), data_of<Tr>(exp_avg_sq),
                  param->numel, s);
  });
}

}  // namespace plrt::cpu
