// unscale_check (ABI 1.3): the gradient scaler's unscale, as
// torch._amp_foreach_non_finite_check_and_unscale_, fused into one pass: x = x * inv_scale (in C,
// rounded once on store) and found_inf = 1.0f when any element was inf or NaN before scaling.
// The flag is only ever set: threads that saw a non-finite element all store the same 1.0f, so
// no atomic is needed and one flag collects many tensors (and many calls).
#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

template <class Tr>
struct UnscaleOp {
  typename Tr::S* x;
  typename Tr::C inv;
  float* found_inf;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<typename Tr::S, W> p = load_pack<W>(x + i);
    bool bad = false;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const typename Tr::C v = Tr::load(p.v[k]);
      bad |= !isfinite(v);
      p.v[k] = Tr::store(v * inv);
    }
    store_pack<W>(x + i, p);
    if (bad) *found_inf = 1.0f;
  }
};

}  // namespace

void launch_unscale_check(const Launch& L, const PL_Tensor& x, double inv_scale, float* found_inf) {
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const UnscaleOp<Tr> op{static_cast<S*>(x.data), static_cast<typename Tr::C>(inv_scale), found_inf};
    launch_apply<pack_width(sizeof(S))>(L, x.numel, aligned(x.data, 16), op, "unscale_check");
  });
}

}  // namespace plrt::cuda
