// pl_find_usable_devices and the devices="usable[:N]" form: the device table, the selection, the
// log lines that say what was skipped.
#include "find_usable.hpp"

#include "device_parser.hpp"
#include "device_probe.hpp"
#include "runtime_impl.hpp"
#include "usable_devices.hpp"

#include <algorithm>
#include <cstdlib>

namespace plrt::rt {

std::vector<int32_t> find_usable_cuda_devices(PL_Runtime* rt, int32_t n, const PL_UsableDeviceOptions* options,
                                              const std::string& what, bool require_some) {
  // Thresholds and the count are checked before anything is probed: a typo costs no fork.
  const UsableThresholds thresholds = usable_thresholds(options, [](const char* name) { return std::getenv(name); });
  if (n < -1) select_usable({}, n, thresholds, what);  // throws, naming n
  if (n == 0) return {};
  std::chrono::milliseconds timeout = kDefaultProbeTimeout;
  if (options && options->probe_timeout_ms > 0) timeout = std::chrono::milliseconds(options->probe_timeout_ms);
  const DeviceTable table = cuda_device_table(rt, timeout);
  for (const auto& note : table.notes) rt->logger->info("usable devices: {}", note);
  std::vector<std::string> skipped;
  std::vector<int32_t> ids = select_usable(table, n, thresholds, what, &skipped);
  if (ids.empty() && require_some)  // "usable" (-1) with every device taken
    fail(PL_ERR_INVALID_ARGUMENT, what + ": none of the " + std::to_string(table.devices.size()) +
                                      " visible CUDA devices is usable now; occupied: " +
                                      describe_occupied(table, thresholds));
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ", ") + std::to_string(id);
  rt->logger->info("usable cuda devices: [{}] of {} visible", list, table.devices.size());
  for (const auto& s : skipped) rt->logger->info("usable devices: skipped {}", s);
  return ids;
}

std::vector<int32_t> resolve_usable_devices(PL_Runtime* rt, const PL_DeviceSpec& spec, int32_t n,
                                            const std::string& accelerator, PL_DeviceType device_type,
                                            int32_t assume_device_count) {
  const std::string what = "devices=" + describe(spec);
  if (device_type != PL_DEVICE_CUDA)
    fail(PL_ERR_INVALID_ARGUMENT, what + " finds free CUDA devices, but the accelerator is '" + accelerator +
                                      "'; valid: accelerator 'cuda' (or 'gpu', or 'auto'), or a devices value "
                                      "for " + accelerator + " such as 2");
  if (assume_device_count >= 0)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": usable needs the real devices, and --assume-device-count " +
                                      std::to_string(assume_device_count) +
                                      " has none to look at; check the configuration with a count or a list "
                                      "instead (e.g. --devices 2)");
  return find_usable_cuda_devices(rt, n, nullptr, what, /*require_some=*/true);
}

}  // namespace plrt::rt

using namespace plrt::rt;

extern "C" {

PL_EXPORT PL_Error* pl_find_usable_devices(PL_Runtime* rt, const char* accelerator, int32_t num_devices,
                                           const PL_UsableDeviceOptions* options, int32_t* out_ids, size_t capacity,
                                           size_t* out_count) {
  return guarded([&] {
    if (!rt || !out_count) fail(PL_ERR_INVALID_ARGUMENT, "pl_find_usable_devices: runtime or out_count is NULL");
    *out_count = 0;
    if (!out_ids && capacity > 0)
      fail(PL_ERR_INVALID_ARGUMENT, "pl_find_usable_devices: out_ids is NULL with capacity " + std::to_string(capacity));
    const std::string accel = accelerator ? accelerator : "cuda";
    if (accel != "cuda" && accel != "gpu")
      fail(PL_ERR_INVALID_ARGUMENT, "pl_find_usable_devices: accelerator='" + accel +
                                        "' has no usable-device check; valid: cuda, gpu (its alias)");
    const auto ids =
        find_usable_cuda_devices(rt, num_devices, options, "find_usable_devices(" + std::to_string(num_devices) + ")", false);
    *out_count = ids.size();
    if (out_ids && capacity < ids.size())
      fail(PL_ERR_INVALID_ARGUMENT, "pl_find_usable_devices: capacity " + std::to_string(capacity) + " is less than the " +
                                        std::to_string(ids.size()) + " devices found");
    if (out_ids) std::copy(ids.begin(), ids.end(), out_ids);
  });
}

}  // extern "C"
