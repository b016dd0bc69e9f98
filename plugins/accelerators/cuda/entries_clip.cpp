// sum_squares, clamp (ABI 1.5, gradient clipping): the shared argument rules (kernel_args.hpp),
// then asynchronous launches on the caller's stream (kernels_clip.cu).
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {

PL_Error* cuda_sum_squares(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::sum_squares(kTarget, x, out);
    DeviceScope scope("sum_squares", *x, "x", stream);
    launch_sum_squares(scope.launch(), *x, static_cast<double*>(out->data));
  });
}

PL_Error* cuda_clamp(PL_Accelerator* acc, PL_Tensor* x, double lo, double hi, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::clamp(kTarget, x, lo, hi);
    DeviceScope scope("clamp", *x, "x", stream);
    launch_clamp(scope.launch(), *x, lo, hi);
  });
}

}  // namespace plrt::cuda
