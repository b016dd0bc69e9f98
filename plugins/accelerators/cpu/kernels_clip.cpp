// sum_squares and clamp: the gradient clipping kernels (ABI 1.5; see kernels.hpp), by norm and by
// value, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_ need them.
#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;

constexpr int kLanes = 8;  // interleaved partial sums: independent chains, added in a fixed order

// sum of x[i]^2 in double: element i goes to lane i % 8, then the lanes add pairwise.  The order is
// fixed, so the result is the same on every call (and on every rank that holds the same data).
template <class Tr>
double sum_squares_loop(const typename Tr::Storage* x, int64_t n) {
  double lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double v = static_cast<double>(Tr::load(x[i + k]));
      lane[k] = lane[k] + v * v;
    }
  for (int64_t i = whole; i < n; ++i) {
    const double v = static_cast<double>(Tr::load(x[i]));
    lane[i - whole] = lane[i - whole] + v * v;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Elements below lo become lo and above hi become hi, each bound rounded once to the dtype; the
// rest (NaN included) keep their bits.
template <class Tr>
void clamp_loop(typename Tr::Storage* x, int64_t n, double lo, double hi) {
  using C = typename Tr::C;
  using S = typename Tr::Storage;
  const S s_lo = Tr::from_double(lo), s_hi = Tr::from_double(hi);
  const C c_lo = Tr::load(s_lo), c_hi = Tr::load(s_hi);
  for (int64_t i = 0; i < n; ++i) {
    const C v = Tr::load(x[i]);
    x[i] = v < c_lo ? s_lo : v > c_hi ? s_hi : x[i];
  }
}

}  // namespace

void sum_squares(const PL_Tensor* x, const PL_Tensor* out) {
  kernel_args::sum_squares(kTarget, x, out);
  double total = 0;
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    total = sum_squares_loop<Tr>(data_of<Tr>(x), x->numel);
  });
  double* acc = static_cast<double*>(out->data);
  *acc = *acc + total;  // only added to: one out collects many tensors
}

void clamp(const PL_Tensor* x, double lo, double hi) {
  kernel_args::clamp(kTarget, x, lo, hi);
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    clamp_loop<Tr>(data_of<Tr>(x), x->numel, lo, hi);
  });
}

}  // namespace plrt::cpu
