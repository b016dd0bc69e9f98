// unscale_check: the gradient scaler's unscale with its inf/NaN check (ABI 1.3; see kernels.hpp).
#include "kernels.hpp"
#include "kernels_matrix.hpp"

#include <cmath>
#include <limits>
#include <string>

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
  const char* op = "unscale_check";
  check_cpu_tensor(x, op, "x");
  require_float_dtype(x, "x", op);
  check_cpu_tensor(found_inf, op, "found_inf");
  if (found_inf->dtype != PL_F32)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": found_inf is " + pl_dtype_name(found_inf->dtype) +
                                      "; it must be float32 with one element");
  if (found_inf->numel != 1)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": found_inf has " + std::to_string(found_inf->numel) +
                                      " elements; it must have exactly 1 (float32)");
  check_no_overlap(found_inf, "found_inf", x, "x", op, false);
  // Finite in the compute type too: 1e300 is a finite double but inf in float.
  const bool f64 = x->dtype == PL_F64;
  const double limit = f64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
  if (!(std::fabs(inv_scale) <= limit))
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": inv_scale " + num(inv_scale) + " is invalid; it must be finite" +
                                      (f64 ? "" : " in float32 (|inv_scale| <= " + num(std::numeric_limits<float>::max()) +
                                                      ") for a " + pl_dtype_name(x->dtype) + " tensor"));
  bool bad = false;
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    bad = unscale_loop<Tr>(data_of<Tr>(x), x->numel, static_cast<typename Tr::C>(inv_scale));
  });
  // Only ever set: one flag collects the check over many tensors.
  if (bad) *static_cast<float*>(found_inf->data) = 1.0f;
}

}  // namespace plrt::cpu
