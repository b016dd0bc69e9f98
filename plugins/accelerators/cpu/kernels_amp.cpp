// unscale_check: the gradient scaler's unscale with its inf/NaN check (ABI 1.3; see kernels.hpp).
#include <cmath>
#include <limits>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;

// Scales x in place and says whether any element was inf or NaN before scaling.  The check is a
// comparison whose results are OR-ed, so the loop stays one pass that the compiler can vectorise.
template <class Tr>
bool unscale_loop(typename Tr::Storage* x, int64_t n, typename Tr::C inv) {
  using C = typename Tr::C;
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    const C v = Tr::load(x[i]);
    bad |= !(std::fabs(v) <= std::numeric_limits<C>::max());  // true for +-inf and NaN
    x[i] = Tr::store(v * inv);
  }
  return bad;
}

}  // namespace

void unscale_check(const PL_Tensor* x, double inv_scale, const PL_Tensor* found_inf) {
  kernel_args::unscale_check(kTarget, x, inv_scale, found_inf);
  bool bad = false;
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    bad = unscale_loop<Tr>(data_of<Tr>(x), x->numel, static_cast<typename Tr::C>(inv_scale));
  });
  // Only ever set: one flag collects the check over many tensors.
  if (bad) *static_cast<float*>(found_inf->data) = 1.0f;
}

}  // namespace plrt::cpu
