// The host's own loops for accelerator entries that a plugin built for an older ABI minor lacks:
// ABI 1.5's sum_squares and clamp (gradient clipping).  pl::Accelerator calls them when the
// plugin's table has no such entry.  They check their arguments as the plugins do (the same codes
// and, but for the "accelerator '<name>':" prefix, the same messages as
// plugins/accelerators/common/kernel_args.hpp), then work in host memory: a tensor that lives on a
// device is copied to the host through the accelerator (a blocking copy) and, for clamp, back.  The
// arithmetic is the cpu reference's (plugins/accelerators/cpu/kernels.hpp); the sum is sequential.
#pragma once

#include <plrt/pl_tensor.h>

#include <plrt/sdk/accelerator.hpp>

namespace plrt::sdk {

void host_sum_squares(const pl::Accelerator& acc, const PL_Tensor& x, PL_Tensor& out);
void host_clamp(const pl::Accelerator& acc, PL_Tensor& x, double lo, double hi);

}  // namespace plrt::sdk
