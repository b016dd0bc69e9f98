// What the cuda accelerator knows about each visible CUDA device when it looks for usable ones
// (device_status, usable_rules.hpp), and the table's JSON form.  The same JSON is the format of
// PL_CUDA_DEVICE_TABLE (a simulated machine, for tests and CI without a GPU) and what the probe
// child sends back (device_probe.cpp):
//
//   {
//     "devices": [                      required; CUDA's visible devices, in CUDA's order
//       {
//         "index": 0,                   optional; if given, its position in the list
//         "name": "NVIDIA H100 80GB HBM3",
//         "uuid": "GPU-5a1f...",
//         "compute_mode": "default",    default | exclusive_process | exclusive_thread |
//                                       prohibited | unknown (the default: no NVML)
//         "processes": [                other processes with a context on it (NVML)
//           {"pid": 4242, "used_bytes": 3435973837}     used_bytes null or absent: unknown
//         ],
//         "utilization_percent": 87,    0..100; null or absent: unknown
//         "context_ok": true,           false: this process could not make a context there
//         "context_error": "cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable"
//       }
//     ],
//     "reason": "why there is no device",   optional; shown when "devices" is empty
//     "notes": ["what the probe could not see"]   optional; logged
//   }
//
// Every key but "devices" may be left out; an unknown key is an error (it is most likely a typo).
// Errors name where the table came from (e.g. "PL_CUDA_DEVICE_TABLE=/tmp/t.json"), the field
// ("devices[1].compute_mode") and what is valid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace plrt::cuda {

enum class ComputeMode {
  kUnknown,
  kDefault,
  kExclusiveProcess,
  kExclusiveThread,
  kProhibited
};

struct ForeignProcess {
  int64_t pid = 0;
  std::optional<uint64_t> used_bytes;  // nullopt: NVML could not say
};

struct DeviceRecord {
  int32_t index = 0;  // CUDA's visible index: what set_device takes
  std::string name;   // "" when unknown
  std::string uuid;
  ComputeMode compute_mode = ComputeMode::kUnknown;
  std::vector<ForeignProcess> processes;  // others' contexts on it (the caller itself left out)
  std::optional<double> utilization_percent;
  bool context_ok = true;
  std::string context_error;  // when !context_ok
};

struct DeviceTable {
  std::vector<DeviceRecord> devices;
  std::string reason;              // why there is no device, when there is none
  std::vector<std::string> notes;  // what could not be seen (no NVML, an unmapped device, ...)
};

const char* compute_mode_name(ComputeMode mode);

// Parses a table; `origin` starts every error message.  Throws plrt::plugin::Failure
// (PL_ERR_INVALID_ARGUMENT).
DeviceTable table_from_json(const std::string& text, const std::string& origin);
std::string table_to_json(const DeviceTable& table);

// One device object, as inside "devices" (the probe child sends them one per line).  `position`
// is the device's place in the table; `field` names it in errors ("devices[1]").
DeviceRecord device_from_json(const std::string& text, int32_t position, const std::string& origin,
                              const std::string& field);
std::string device_to_json(const DeviceRecord& device);

// Reads PL_CUDA_DEVICE_TABLE's file; errors start with "PL_CUDA_DEVICE_TABLE=<path>".
DeviceTable read_table_file(const std::string& path);

}  // namespace plrt::cuda
