// The cuda accelerator's device_status entry (ABI 1.4; the contract is in pl_accelerator.h): which
// visible devices a job could take now, judged by usable_rules.hpp over the device table
// (PL_CUDA_DEVICE_TABLE's simulated machine, else the probe in a forked child, device_probe.hpp),
// so that the caller's process never makes a CUDA context.
//
// Options: "max_utilization" (percent), "max_foreign_memory_mb", "probe_timeout_ms" (usable_rules.hpp).
// With no visible device it fails with PL_ERR_INVALID_ARGUMENT saying why ("no CUDA device is
// visible (<no driver, no device, ...>)"): a count of 0 would leave the caller no way to tell.
#pragma once

#include <plrt/pl_accelerator.h>

namespace plrt::cuda {

PL_Error* cuda_device_status(PL_Accelerator* acc, const PL_OptionList* options, PL_DeviceStatus* out, size_t capacity,
                             size_t* out_count);

}  // namespace plrt::cuda
