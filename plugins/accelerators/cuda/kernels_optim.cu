// sgd_step and adam_step, fused: one pass reads param, grad and the optimizer state once and
// writes param and the state once.  The per-element formulas are the cpu reference's
// (plugins/accelerators/cpu/kernels_optim.cpp), operation for operation, in the compute type C;
// the double scalars were computed by the entry exactly as the cpu computes them.
#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

template <class Tr>
struct SgdOp {
  using S = typename Tr::S;
  using C = typename Tr::C;
  S* p;
  const S* g;
  S* buf;  // NULL without momentum
  C lr, mom, damp1, wd;
  bool has_wd, has_momentum, first, nesterov;

  template <int W>
  __device__ void run(int64_t i) const {
    Pack<S, W> pp = load_pack<W>(p + i);
    const Pack<S, W> pg = load_pack<W>(g + i);
    Pack<S, W> pb;
    if (has_momentum && !first) pb = load_pack<W>(buf + i);  // the first step only writes it
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const C pi = Tr::load(pp.v[k]);
      C d = Tr::load(pg.v[k]);
      if (has_wd) d = d + wd * pi;
      if (has_momentum) {
        const C b = first ? d : mom * Tr::load(pb.v[k]) + damp1 * d;
        pb.v[k] = Tr::store(b);
        d = nesterov ? d + mom * b : b;  // b: the unrounded value, as the cpu
      }
      pp.v[k] = Tr::store(pi - lr * d);
    }
    if (has_momentum) store_pack<W>(buf + i, pb);
    store_pack<W>(p + i, pp);
  }
};

template <class Tr>
struct AdamOp {
  using S = typename Tr::S;
  using C = typename Tr::C;
  S* p;
  const S* g;
  S* m;
  S* v;
  C b1, b2, omb1, omb2, eps, wd, step_size, bc2_sqrt, decay;
  bool decoupled, has_wd, freeze_v, grad_is_m;

  template <int W>
  __device__ void run(int64_t i) const {
    Pack<S, W> pp = load_pack<W>(p + i);
    const Pack<S, W> pg = load_pack<W>(g + i);
    Pack<S, W> pm = load_pack<W>(m + i);
    Pack<S, W> pv = load_pack<W>(v + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      C pi = Tr::load(pp.v[k]);
      C gi = Tr::load(pg.v[k]);
      if (decoupled) {
        if (has_wd) pi = pi * decay;
      } else if (has_wd && !grad_is_m) {
        gi = gi + wd * pi;
      }
      const C mi = grad_is_m ? gi : b1 * Tr::load(pm.v[k]) + omb1 * gi;
      const C vi = freeze_v ? Tr::load(pv.v[k]) : b2 * Tr::load(pv.v[k]) + (omb2 * gi) * gi;
      pm.v[k] = Tr::store(mi);
      pv.v[k] = Tr::store(vi);                    // unchanged when frozen
      const C denom = sqrt(vi) / bc2_sqrt + eps;  // correctly rounded sqrt and division (no fast math)
      pp.v[k] = Tr::store(pi - step_size * (mi / denom));
    }
    store_pack<W>(m + i, pm);
    store_pack<W>(v + i, pv);
    store_pack<W>(p + i, pp);
  }
};

}  // namespace

void launch_sgd(const Launch& L, const PL_Tensor& param, const PL_Tensor& grad, const PL_Tensor* momentum_buf,
                const SgdScalars& s) {
  dispatch_float(param.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    using C = typename Tr::C;
    SgdOp<Tr> op{};
    op.p = static_cast<S*>(param.data);
    op.g = static_cast<const S*>(grad.data);
    op.buf = s.has_momentum ? static_cast<S*>(momentum_buf->data) : nullptr;
    op.lr = static_cast<C>(s.lr);
    op.mom = static_cast<C>(s.momentum);
    op.damp1 = static_cast<C>(s.one_minus_dampening);
    op.wd = static_cast<C>(s.weight_decay);
    op.has_wd = s.has_wd;
    op.has_momentum = s.has_momentum;
    op.first = s.first_step;
    op.nesterov = s.nesterov;
    const bool vec = aligned(param.data, 16) && aligned(grad.data, 16) && (!s.has_momentum || aligned(op.buf, 16));
    launch_apply<pack_width(sizeof(S))>(L, param.numel, vec, op, "sgd_step");
  });
}

void launch_adam(const Launch& L, const PL_Tensor& param, const PL_Tensor& grad, const PL_Tensor& exp_avg,
                 const PL_Tensor& exp_avg_sq, const AdamScalars& s) {
  dispatch_float(param.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    using C = typename Tr::C;
    AdamOp<Tr> op{};
    op.p = static_cast<S*>(param.data);
    op.g = static_cast<const S*>(grad.data);
    op.m = static_cast<S*>(exp_avg.data);
    op.v = static_cast<S*>(exp_avg_sq.data);
    op.b1 = static_cast<C>(s.beta1);
    op.b2 = static_cast<C>(s.beta2);
    op.omb1 = static_cast<C>(s.one_minus_beta1);
    op.omb2 = static_cast<C>(s.one_minus_beta2);
    op.eps = static_cast<C>(s.eps);
    op.wd = static_cast<C>(s.weight_decay);
    op.step_size = static_cast<C>(s.step_size);
    op.bc2_sqrt = static_cast<C>(s.bc2_sqrt);
    op.decay = static_cast<C>(s.decay);
    op.decoupled = s.decoupled;
    op.has_wd = s.has_wd;
    op.freeze_v = s.freeze_v;
    op.grad_is_m = s.grad_is_m;
    const bool vec =
        aligned(param.data, 16) && aligned(grad.data, 16) && aligned(exp_avg.data, 16) && aligned(exp_avg_sq.data, 16);
    launch_apply<pack_width(sizeof(S))>(L, param.numel, vec, op, "adam_step");
  });
}

}  // namespace plrt::cuda
