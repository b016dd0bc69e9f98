// When a CUDA device is usable, for device_status (Lightning's find_usable_cuda_devices, which
// tries a tensor on each device, extended with what a failed allocation does not show).  Pure
// functions over a DeviceRecord: no device is touched, so the tests call them directly.
//
// A device is occupied, for the first of these reasons (PL_DeviceStatus.reason):
//   compute mode prohibited                     no process may use it
//   exclusive mode, held by another process     exclusive_process/thread with another process on
//                                               it, or no context could be made
//   cannot create a context: <cuda error>       what Lightning's check catches
//   busy: 3.2 GiB used by other processes ...   more than the memory threshold (default 1 GiB)
//   busy: 87% utilization, more than 10% ...    above the utilization threshold (default 10%)
//
// The thresholds come from device_status's options ("max_utilization" in percent,
// "max_foreign_memory_mb"), else PL_USABLE_MAX_UTILIZATION and PL_USABLE_MAX_FOREIGN_MEMORY_MB,
// else the defaults; "probe_timeout_ms" bounds the probe (device_probe.hpp).  Which devices a
// job gets from these statuses (Lightning's num_devices rules) is the runtime's business.
#pragma once

#include <plrt/pl_abi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "device_table.hpp"

namespace plrt::cuda {

inline constexpr double kDefaultMaxUtilization = 10.0;        // percent
inline constexpr int64_t kDefaultMaxForeignMemoryMiB = 1024;  // 1 GiB

struct UsableThresholds {
  double max_utilization_percent = kDefaultMaxUtilization;  // busier than this: occupied
  uint64_t max_foreign_memory_bytes = uint64_t(kDefaultMaxForeignMemoryMiB) << 20;
};

struct UsableSettings {
  UsableThresholds thresholds;
  std::chrono::milliseconds probe_timeout{30000};
};

using EnvLookup = std::function<const char*(const char*)>;

// The settings from device_status's options (may be NULL), the environment, the defaults.  A bad
// value (from either) or an unknown option is PL_ERR_INVALID_ARGUMENT naming it and what is valid.
UsableSettings usable_settings(const PL_OptionList* options, const EnvLookup& env);

// Why `device` cannot be used, or nullopt when it can.
std::optional<std::string> why_unusable(const DeviceRecord& device, const UsableThresholds& thresholds);

// "3.2 GiB", "512 MiB": how much memory, for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace plrt::cuda
