// Choosing usable CUDA devices from a device table: Lightning's find_usable_cuda_devices
// (lightning/fabric/accelerators/cuda.py), which tries a tensor on each device, extended with
// what a failed allocation does not show.  Pure functions over a DeviceTable: no device is touched.
//
// A device is occupied, for the first of these reasons:
//   compute mode prohibited                     no process may use it
//   exclusive mode, held by another process     exclusive_process/thread with another process on
//                                               it, or no context could be made
//   cannot create a context: <cuda error>       what Lightning's check catches
//   busy: 3.2 GiB used by other processes       more than the memory threshold (default 1 GiB)
//   busy: 87% utilization                       above the utilization threshold (default 10%)
//
// num_devices, as Lightning: 0 -> []; -1 -> every usable device (possibly none); n > the visible
// count -> an error; fewer than n usable -> an error naming each occupied device and why.
#pragma once

#include "device_table.hpp"

#include <plrt/runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace plrt::rt {

inline constexpr double kDefaultMaxUtilization = 10.0;            // percent
inline constexpr int64_t kDefaultMaxForeignMemoryMiB = 1024;       // 1 GiB

struct UsableThresholds {
  double max_utilization_percent = kDefaultMaxUtilization;  // busier than this: occupied
  uint64_t max_foreign_memory_bytes = uint64_t(kDefaultMaxForeignMemoryMiB) << 20;
};

using EnvLookup = std::function<const char*(const char*)>;

// The thresholds: an option that is set wins, then PL_USABLE_MAX_UTILIZATION and
// PL_USABLE_MAX_FOREIGN_MEMORY_MB (MiB), then the defaults.  A bad value (from either) is an
// error naming it and what is valid.  `options` may be NULL.
UsableThresholds usable_thresholds(const PL_UsableDeviceOptions* options, const EnvLookup& env);

// Why `device` cannot be used, or nullopt when it can.
std::optional<std::string> why_unusable(const DeviceRecord& device, const UsableThresholds& thresholds);

// The first `num_devices` usable devices of `table` (see the top of this file).  `what` starts
// every error ("find_usable_devices(3)", "devices='usable:3'").  Occupied devices skipped on the
// way are appended to *skipped (may be NULL) as "1 'NVIDIA H100' (busy: ...)".
std::vector<int32_t> select_usable(const DeviceTable& table, int32_t num_devices, const UsableThresholds& thresholds,
                                   const std::string& what, std::vector<std::string>* skipped = nullptr);

// The list of occupied devices with their reasons, for an error that found too few.
std::string describe_occupied(const DeviceTable& table, const UsableThresholds& thresholds);

// devices="usable" (-1: every usable device) or "usable:N" (a PL_DEVICES_STRING or
// PL_DEVICES_TEXT spec): the N asked for, or nullopt for any other spec.  A malformed usable form
// ("usable:0", "usable:x", "usable:-2") is an error naming it and the valid forms.
std::optional<int32_t> usable_request(const PL_DeviceSpec& spec);

// "3.2 GiB", "512 MiB": how much memory, for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace plrt::rt
