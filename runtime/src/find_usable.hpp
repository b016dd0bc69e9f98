// The usable-device check as the runtime uses it: pl_find_usable_devices (the C API) and the
// devices="usable[:N]" form of pl_runtime_resolve_job.
#pragma once

#include <plrt/runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace plrt::rt {

// The device table (simulated or probed), then select_usable; logs what was skipped and why.
// `what` starts every error; `require_some` makes "none usable" an error naming the occupied ones.
std::vector<int32_t> find_usable_cuda_devices(PL_Runtime* runtime, int32_t num_devices,
                                              const PL_UsableDeviceOptions* options, const std::string& what,
                                              bool require_some);

// For pl_runtime_resolve_job: devices="usable[:N]" (`num_devices`, from usable_request) on the
// accelerator plugin `accelerator` of type `device_type`.  Errors: not a CUDA accelerator, an
// assumed device count (the check needs the real devices), no usable device at all.
std::vector<int32_t> resolve_usable_devices(PL_Runtime* runtime, const PL_DeviceSpec& spec, int32_t num_devices,
                                            const std::string& accelerator, PL_DeviceType device_type,
                                            int32_t assume_device_count);

}  // namespace plrt::rt
