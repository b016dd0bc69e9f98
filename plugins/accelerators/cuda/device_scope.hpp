// DeviceScope: the device a kernel entry runs on.  It checks that the tensors' device index names
// a visible CUDA device, makes it current for the call (the caller's current device comes back at
// the end, as a device guard does), and describes the launch.
#pragma once

#include <plrt/pl_accelerator.h>

#include "cuda_common.hpp"

namespace plrt::cuda {

class DeviceScope {
 public:
  // `t` is a checked cuda tensor (kernel_args.hpp); `op` and `what` name the entry and argument.
  DeviceScope(const char* op, const PL_Tensor& t, const char* what, PL_Stream* stream);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  const Launch& launch() const { return launch_; }
  int device() const { return launch_.device; }
  cudaStream_t stream() const { return launch_.stream; }

 private:
  Launch launch_;
  int previous_ = -1;  // restored by the destructor when it differs
};

// Checks a device index against the visible devices; `subject` says whose index it is.
void check_device_index(int32_t index, const std::string& subject);

}  // namespace plrt::cuda
