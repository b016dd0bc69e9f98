// pl::find_usable_cuda_devices: Lightning's find_usable_cuda_devices, which also sees devices in
// exclusive mode held by another process and devices busy with other processes' memory or work
// (through NVML).  CUDA is never initialised in the calling process: a child process makes the
// contexts (see pl_find_usable_devices in plrt/runtime.h).  The same check is behind
// devices="usable:N" / "usable" in pl::Trainer, pl::Runtime::resolve and plrun --devices.
//
//   pl::Runtime rt;
//   std::vector<int> ids = pl::find_usable_cuda_devices(rt, 2);   // e.g. {1, 3}
//
// 0 -> {}; -1 -> every usable device; more than are visible, or too few usable -> pl::Error
// naming each occupied device (index, name, why).  PL_CUDA_DEVICE_TABLE=<file.json> simulates a
// machine (format: plugins/accelerators/cuda/device_table.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <vector>

namespace pl {

struct UsableDeviceOptions {
  // A device busier than this (percent, 0..100) is occupied.  Default: PL_USABLE_MAX_UTILIZATION, else 10.
  std::optional<double> max_utilization_percent;
  // More MiB than this used by other processes: occupied.  Default: PL_USABLE_MAX_FOREIGN_MEMORY_MB, else 1024.
  std::optional<int64_t> max_foreign_memory_mb;
  // How long the probe may take; devices that have not answered are occupied.  0: 30 s.
  std::chrono::milliseconds probe_timeout{0};
};

inline std::vector<int> find_usable_cuda_devices(const Runtime& rt, int num_devices = -1,
                                                 const UsableDeviceOptions& options = {}) {
  PL_UsableDeviceOptions o{};
  o.struct_size = sizeof o;
  o.has_max_utilization = options.max_utilization_percent ? 1 : 0;
  o.max_utilization_percent = options.max_utilization_percent.value_or(0);
  o.has_max_foreign_memory = options.max_foreign_memory_mb ? 1 : 0;
  o.max_foreign_memory_mb = options.max_foreign_memory_mb.value_or(0);
  o.probe_timeout_ms = options.probe_timeout.count();
  // A buffer that fits any real answer (num_devices, or every device of a large node), so that one
  // probe suffices; a larger answer is asked again with room for it.
  std::vector<int32_t> ids(static_cast<size_t>(std::max(num_devices, 256)));
  size_t n = 0;
  PL_Error* e = pl_find_usable_devices(rt.get(), "cuda", num_devices, &o, ids.data(), ids.size(), &n);
  if (e && n > ids.size()) {
    pl_error_destroy(e);
    ids.resize(n);
    e = pl_find_usable_devices(rt.get(), "cuda", num_devices, &o, ids.data(), ids.size(), &n);
  }
  check(e);
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)};
}

// Whether a devices text is the usable form ("usable", "usable:N"), which only resolving a job can
// turn into indices (plrun resolves it once and hands its workers the list).
inline bool is_usable_devices_text(const std::string& text) {
  const size_t b = text.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  const size_t e = text.find_last_not_of(" \t\n\r\f\v");
  const std::string s = text.substr(b, e - b + 1);
  return s == "usable" || s.compare(0, 7, "usable:") == 0;
}

}  // namespace pl
