// device_status for the cuda accelerator: the settings, the table (simulated or probed), one
// PL_DeviceStatus per device; see device_status.hpp.
#include "device_status.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device_probe.hpp"
#include "instance.hpp"
#include "usable_rules.hpp"

namespace plrt::cuda {
namespace {

using plrt::plugin::fail;
using plrt::plugin::logf;
using Clock = std::chrono::steady_clock;

// PL_CUDA_DEVICE_TABLE's table when it is set (a bad file is an error naming it), else the probe.
DeviceTable device_table(const PL_Host* host, std::chrono::milliseconds timeout) {
  const char* path = std::getenv("PL_CUDA_DEVICE_TABLE");
  if (path && *path) {
    logf(host, PL_LOG_DEBUG, "cuda", "usable devices: the simulated table PL_CUDA_DEVICE_TABLE=%s", path);
    return read_table_file(path);
  }
  const auto start = Clock::now();
  DeviceTable t = probe_cuda_devices(timeout);
  logf(host, PL_LOG_DEBUG, "cuda", "usable devices: the probe saw %zu device(s) in %lld ms (at most %lld)",
       t.devices.size(),
       static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()),
       static_cast<long long>(timeout.count()));
  return t;
}

}  // namespace

PL_Error* cuda_device_status(PL_Accelerator* acc, const PL_OptionList* options, PL_DeviceStatus* out, size_t capacity,
                             size_t* out_count) {
  return run(acc, [&] {
    // Every argument is checked before anything is probed: a typo costs no fork.
    if (out_count == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "cuda: device_status: out_count is NULL");
    *out_count = 0;
    if (out == nullptr && capacity > 0)
      fail(PL_ERR_INVALID_ARGUMENT, "cuda: device_status: out is NULL with capacity " + std::to_string(capacity));
    constexpr size_t kMinSize = PL_STRUCT_SIZE(PL_DeviceStatus, reason);
    for (size_t i = 0; i < capacity; ++i)
      if (out[i].struct_size < kMinSize)
        fail(PL_ERR_VERSION, "cuda: device_status: out[" + std::to_string(i) + "].struct_size " +
                                 std::to_string(out[i].struct_size) + " is smaller than the ABI 1.4 size " +
                                 std::to_string(kMinSize) + "; set it to sizeof(PL_DeviceStatus)");
    const UsableSettings settings = usable_settings(options, [](const char* name) { return std::getenv(name); });

    const DeviceTable table = device_table(acc->host, settings.probe_timeout);
    for (const auto& note : table.notes) logf(acc->host, PL_LOG_INFO, "cuda", "usable devices: %s", note.c_str());
    if (table.devices.empty())
      fail(PL_ERR_INVALID_ARGUMENT, "no CUDA device is visible" +
                                        (table.reason.empty() ? std::string() : " (" + table.reason + ")") +
                                        "; --accelerator cpu runs on the CPU instead");
    *out_count = table.devices.size();
    for (size_t i = 0; i < table.devices.size() && i < capacity; ++i) {
      const DeviceRecord& d = table.devices[i];
      PL_DeviceStatus s{};
      s.index = d.index;
      const auto why = why_unusable(d, settings.thresholds);
      s.usable = why ? 0 : 1;
      std::snprintf(s.name, sizeof s.name, "%s", d.name.c_str());
      std::snprintf(s.reason, sizeof s.reason, "%s", why ? why->c_str() : "");
      const size_t n = out[i].struct_size < sizeof s ? out[i].struct_size : sizeof s;
      s.struct_size = n;
      std::memcpy(static_cast<void*>(&out[i]), &s, n);
    }
  });
}

}  // namespace plrt::cuda
