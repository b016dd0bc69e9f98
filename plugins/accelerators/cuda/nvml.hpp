// What NVML (the driver's management library) says about every GPU: name, UUID, compute mode,
// the processes with a context on it and their memory, utilization.  libnvidia-ml.so.1 is loaded
// at run time; without it (no driver, a container without the library) the snapshot says why and
// the usable-device check falls back to the context check alone.
//
// Called only in the probe child (probe_child.cpp), never in the caller's process: NVML needs no
// CUDA context, but keeping the caller free of the driver entirely costs nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device_table.hpp"

namespace plrt::cuda {

struct NvmlDeviceState {
  std::string name, uuid;
  ComputeMode compute_mode = ComputeMode::kUnknown;
  std::vector<ForeignProcess> processes;  // compute and graphics, the excluded pids left out
  std::optional<double> utilization_percent;
};

struct NvmlSnapshot {
  bool available = false;
  std::string error;                     // when !available: why (library missing, init failed)
  std::vector<NvmlDeviceState> devices;  // NVML's order (PCI bus)
  std::vector<std::string> notes;        // a query that failed on one device, and why
};

// `exclude` are pids that do not count as "other processes" (the caller and the probe itself).
NvmlSnapshot nvml_snapshot(const std::vector<int64_t>& exclude);

}  // namespace plrt::cuda
