// Which NVML device stands behind each of CUDA's visible device indices, from CUDA_VISIBLE_DEVICES
// read as the CUDA runtime reads it: a comma-separated list of integer indices, "GPU-<uuid>"
// (or a unique prefix of one) and "MIG-..." entries; the first invalid entry (out of range,
// unknown, repeated) ends the list, and the devices after it are not visible.  Unset: every device.
//
// Limits (documented, not guessed around):
//  - An integer in CUDA_VISIBLE_DEVICES, and CUDA's own numbering, follow CUDA_DEVICE_ORDER, which
//    is FASTEST_FIRST unless set to PCI_BUS_ID; NVML numbers by PCI bus.  Both agree on machines
//    whose GPUs are all alike (ties go by PCI bus); on mixed machines set
//    CUDA_DEVICE_ORDER=PCI_BUS_ID.  The probe also compares names and drops NVML's data for a
//    device whose name differs, with a note.
//  - MIG instances ("MIG-..." entries, or a GPU in MIG mode) are not mapped: their NVML data
//    (processes, utilization) is per GPU instance and left out; the context check still runs.
// Pure: no driver is touched, so it is tested on its own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace plrt::cuda {

// For each CUDA visible index in [0, cuda_count): the NVML index behind it, or nullopt when it
// cannot be known (a note says why).  `cuda_visible_devices` is the variable's value, NULL when
// unset; `nvml_uuids` lists NVML's devices in NVML's order ("GPU-...").
std::vector<std::optional<size_t>> map_visible_to_nvml(const char* cuda_visible_devices,
                                                       const std::vector<std::string>& nvml_uuids, size_t cuda_count,
                                                       std::vector<std::string>* notes);

}  // namespace plrt::cuda
