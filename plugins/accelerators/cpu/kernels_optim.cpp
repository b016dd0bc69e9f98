// sgd_step and adam_step: torch.optim.SGD and torch.optim.Adam/AdamW on the CPU (see kernels.hpp).
// The checks and the per-call scalars are the shared rules' (kernel_args.hpp); the loops are here.
#include <cmath>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;

using kernel_args::AdamScalars;
using kernel_args::SgdScalars;

template <class Tr>
void sgd_loop(typename Tr::Storage* p, const typename Tr::Storage* g, typename Tr::Storage* buf, int64_t n,
              const SgdScalars& s) {
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

template <class Tr>
void adam_loop(typename Tr::Storage* p, const typename Tr::Storage* g, typename Tr::Storage* m, typename Tr::Storage* v,
               int64_t n, const AdamScalars& s) {
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
  const bool freeze_v = s.freeze_v, grad_is_m = s.grad_is_m;
  for (int64_t i = 0; i < n; ++i) {
    C pi = Tr::load(p[i]);
    C gi = Tr::load(g[i]);
    if (decoupled) {
      if (has_wd) pi = pi * decay;
    } else if (has_wd && !grad_is_m) {
      gi = gi + wd * pi;
    }
    const C mi = grad_is_m ? gi : b1 * Tr::load(m[i]) + omb1 * gi;
    const C vi = freeze_v ? Tr::load(v[i]) : b2 * Tr::load(v[i]) + (omb2 * gi) * gi;
    m[i] = Tr::store(mi);
    if (!freeze_v) v[i] = Tr::store(vi);
    const C denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = Tr::store(pi - step_size * (mi / denom));
  }
}

}  // namespace

void sgd_step(const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* momentum_buf,
              const PL_SgdParams* params) {
  const SgdScalars s = kernel_args::sgd_step(kTarget, param, grad, momentum_buf, params);
  dispatch_float(param->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    sgd_loop<Tr>(data_of<Tr>(param), data_of<Tr>(grad), s.has_momentum ? data_of<Tr>(momentum_buf) : nullptr,
                 param->numel, s);
  });
}

void adam_step(const PL_Tensor* param, const PL_Tensor* grad, const PL_Tensor* exp_avg, const PL_Tensor* exp_avg_sq,
               const PL_AdamParams* params) {
  const AdamScalars s = kernel_args::adam_step(kTarget, param, grad, exp_avg, exp_avg_sq, params);
  dispatch_float(param->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    adam_loop<Tr>(data_of<Tr>(param), data_of<Tr>(grad), data_of<Tr>(exp_avg), data_of<Tr>(exp_avg_sq), param->numel,
                  s);
  });
}

}  // namespace plrt::cpu
