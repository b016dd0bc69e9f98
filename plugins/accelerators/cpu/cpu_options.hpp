// The cpu accelerator's create() options (see cpu_options.cpp).
#pragma once

#include <plrt/pl_abi.h>

namespace plrt::cpu {

// The OpenBLAS thread count create() should set, from the "num_threads" option or, without it,
// from the environment; 0 = leave OpenBLAS's own default.  Throws plrt::plugin::Failure for an
// unknown option or a bad value, naming it.
int blas_threads_for(const PL_OptionList* options);

}  // namespace plrt::cpu
