// The usable-device check as the runtime uses it: pl_find_usable_devices (the C API) and the
// devices="usable[:N]" form of pl_runtime_resolve_job, over any accelerator.  The accelerator
// judges its devices (device_status, ABI 1.4); one without device_status has every device that
// availability() counts usable.  The runtime applies Lightning's num_devices rules
// (usable_devices.hpp) and logs what was skipped and why.
#pragma once

#include <plrt/runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace plrt::rt {

// `accelerator` is a plugin name or alias.  `what` starts every error; `require_some` makes
// "none usable" an error naming the occupied ones.
std::vector<int32_t> find_usable_devices(PL_Runtime* runtime, const std::string& accelerator, int32_t num_devices,
                                         const PL_UsableDeviceOptions* options, const std::string& what,
                                         bool require_some);

// For pl_runtime_resolve_job: devices="usable[:N]" (`num_devices`, from usable_request) on the
// accelerator `accelerator`.  An assumed device count is an error (the check needs the real devices).
std::vector<int32_t> resolve_usable_devices(PL_Runtime* runtime, const PL_DeviceSpec& spec, int32_t num_devices,
                                            const std::string& accelerator, int32_t assume_device_count);

}  // namespace plrt::rt
