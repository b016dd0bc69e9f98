// Host-side helpers shared by the cuda plugin's sources (.cpp and the host half of .cu): CUDA
// errors as plrt::plugin::Failure, the device count and why it may be zero, and what one kernel
// launch needs to know (device, stream, SM count).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "plugin_support.hpp"

namespace plrt::cuda {

using plrt::plugin::fail;

// Throws a Failure for a CUDA error: PL_ERR_RESOURCE when out of memory, else PL_ERR_RUNTIME.
inline void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // clear the (non-sticky) error so that the next call starts clean
  fail(rc == cudaErrorMemoryAllocation ? PL_ERR_RESOURCE : PL_ERR_RUNTIME,
       "cuda: " + what + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
}

// After a <<<...>>> launch: a bad configuration or a dead context, named after the kernel's entry.
inline void check_launch(const char* op) { check_cuda(cudaGetLastError(), std::string(op) + " kernel launch"); }

// The devices this process can use.  Without a driver or a device: 0, and `reason` (when given)
// says why in words, with the runtime's error name.
int device_count_or_zero(std::string* reason);

// What a kernel launch needs: the device (current for the call), the stream (NULL = the device's
// default stream) and the device's SM count (grid sizes).
struct Launch {
  int device = 0;
  cudaStream_t stream = nullptr;
  int sm_count = 1;
};

// A data-dependent check's device slot and host record (kernel_checks.hpp), as a kernel sees them.
struct CheckSlot;
struct CheckRecord;
struct CheckRef {
  CheckSlot* slot = nullptr;      // device memory
  CheckRecord* record = nullptr;  // mapped pinned host memory, device view
};

}  // namespace plrt::cuda
