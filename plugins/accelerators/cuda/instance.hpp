// The cuda accelerator instance (PL_Accelerator) and the boundary helper every exported entry
// runs its body in.  The host table lives in the instance, never in a global; so do the kernel
// check pools and the cuBLAS handles, so that two runtimes' instances stay apart.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "blas_handles.hpp"
#include "kernel_checks.hpp"
#include "plugin_support.hpp"

struct PL_Accelerator {
  explicit PL_Accelerator(const PL_Host* h) : host(h), checks(h) {}
  const PL_Host* host;  // borrowed; outlives the instance
  plrt::cuda::KernelChecks checks;
  plrt::cuda::BlasHandles blas;
};
// Streams and events are the CUDA handles themselves, cast through the opaque ABI types.

namespace plrt::cuda {

// guard() with the instance's host.  A NULL instance breaks the ABI's rule 7 and leaves no host to
// report through: say so and stop, as the cpu plugin does, rather than pretend the call succeeded.
template <class Body>
PL_Error* run(PL_Accelerator* acc, Body&& body) {
  if (acc == nullptr || acc->host == nullptr) {
    std::fprintf(stderr, "plrt cuda accelerator: called with a NULL accelerator instance; aborting\n");
    std::abort();
  }
  return plrt::plugin::guard(acc->host, std::forward<Body>(body));
}

inline cudaStream_t cuda_stream(PL_Stream* s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace plrt::cuda
