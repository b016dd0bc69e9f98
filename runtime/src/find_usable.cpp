// pl_find_usable_devices and the devices="usable[:N]" form: the accelerator's device statuses
// (device_status, or every counted device when it has none), the selection, the log lines that
// say what was skipped.
#include "find_usable.hpp"

#include <algorithm>
#include <cctype>
#include <memory>

#include "device_parser.hpp"
#include "runtime_impl.hpp"
#include "usable_devices.hpp"

namespace plrt::rt {
namespace {

constexpr size_t kFirstCapacity = 256;    // any real machine's devices: one call suffices
constexpr size_t kMaxStatuses = 1 << 16;  // more is a broken plugin, not a machine

// "cpu" -> "CPU": how the errors name an accelerator's devices ("1 visible CPU device").
std::string kind_of(const std::string& name) {
  std::string k = name;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return k;
}

std::string take_message(PL_Error* e) {
  std::string m = e->message;
  pl_error_destroy(e);
  return m;
}

// One instance of the accelerator, destroyed when the check is done.
struct Instance {
  const PL_AcceleratorApi* api = nullptr;
  PL_Accelerator* acc = nullptr;
  ~Instance() {
    if (api && acc) api->destroy(acc);
  }
};

// The statuses `plugin` reports; errors start with `what`.
std::vector<DeviceState> device_states(PL_Runtime* rt, const PL_ResolvedPlugin& plugin, const PL_OptionList& options,
                                       const std::string& what) {
  const std::string name = plugin.plugin->name;
  Instance inst;
  inst.api = static_cast<const PL_AcceleratorApi*>(plugin.plugin->api);
  if (PL_Error* e = inst.api->create(&rt->host, &plugin.presets, &inst.acc)) {
    const PL_ErrorCode code = e->code;
    fail(code, what + ": accelerator '" + name + "' failed to start: " + take_message(e));
  }
  std::vector<DeviceState> states;
  if (!PL_HAS_FIELD(PL_AcceleratorApi, inst.api, device_status) || inst.api->device_status == nullptr) {
    // No judgement offered: every device it counts is usable (the options do not apply).
    PL_DeviceAvailability avail{};
    avail.struct_size = sizeof avail;
    if (PL_Error* e = inst.api->availability(inst.acc, &avail)) {
      const PL_ErrorCode code = e->code;
      fail(code, what + ": accelerator '" + name + "' could not count its devices: " + take_message(e));
    }
    avail.reason[sizeof avail.reason - 1] = '\0';
    if (avail.device_count <= 0)
      fail(PL_ERR_INVALID_ARGUMENT, what + ": no " + kind_of(name) + " device is visible" +
                                        (avail.reason[0] ? std::string(" (") + avail.reason + ")" : std::string()));
    for (int32_t i = 0; i < avail.device_count; ++i) states.push_back(DeviceState{i, true, "", ""});
    return states;
  }
  std::vector<PL_DeviceStatus> out(kFirstCapacity);
  size_t count = 0;
  for (int attempt = 0;; ++attempt) {
    for (auto& s : out) {
      s = PL_DeviceStatus{};
      s.struct_size = sizeof s;
    }
    count = 0;
    if (PL_Error* e = inst.api->device_status(inst.acc, &options, out.data(), out.size(), &count)) {
      const PL_ErrorCode code = e->code;
      fail(code, what + ": " + take_message(e));
    }
    if (count > kMaxStatuses)
      fail(PL_ERR_INTERNAL, what + ": accelerator '" + name + "' reported " + std::to_string(count) +
                                " devices from device_status (at most " + std::to_string(kMaxStatuses) +
                                " make sense)");
    if (count <= out.size()) break;
    if (attempt == 1)  // asked again with room for what it said: the answer keeps growing
      fail(PL_ERR_INTERNAL, what + ": accelerator '" + name + "' reported " + std::to_string(count) +
                                " devices with room for " + std::to_string(out.size()) + ", twice");
    out.resize(count);
  }
  for (size_t i = 0; i < count; ++i) {
    PL_DeviceStatus& s = out[i];
    if (s.index != static_cast<int32_t>(i))
      fail(PL_ERR_INTERNAL, what + ": accelerator '" + name + "' reported device " + std::to_string(s.index) +
                                " in place " + std::to_string(i) + " (device_status lists them in index order)");
    s.name[sizeof s.name - 1] = '\0';
    s.reason[sizeof s.reason - 1] = '\0';
    DeviceState d{s.index, s.usable != 0, s.name, s.reason};
    if (!d.usable && d.reason.empty()) d.reason = "occupied (" + name + " gave no reason)";
    states.push_back(std::move(d));
  }
  if (states.empty()) fail(PL_ERR_INVALID_ARGUMENT, what + ": no " + kind_of(name) + " device is visible");
  return states;
}

}  // namespace

std::vector<int32_t> find_usable_devices(PL_Runtime* rt, const std::string& accelerator, int32_t n,
                                         const PL_UsableDeviceOptions* options, const std::string& what,
                                         bool require_some) {
  // The options and the count are checked before anything is asked: a typo costs no probe.
  StatusOptions opts;
  status_options(options, &opts);
  if (n < -1) select_usable({}, n, what, kind_of(accelerator));  // throws, naming n
  if (n == 0) return {};
  PL_ResolvedPlugin plugin{};
  plugin.struct_size = sizeof plugin;
  if (PL_Error* e = pl_runtime_find_plugin(rt, PL_PLUGIN_ACCELERATOR, accelerator.c_str(), &plugin))
    fail(PL_ERR_INVALID_ARGUMENT, what + ": no " + kind_of(accelerator) + " device is visible (no " + accelerator +
                                      " accelerator plugin: " + take_message(e) + ")");
  const std::string name = plugin.plugin->name;
  const std::vector<DeviceState> states = device_states(rt, plugin, opts.list, what);
  std::vector<std::string> skipped;
  std::vector<int32_t> ids = select_usable(states, n, what, kind_of(name), &skipped);
  if (ids.empty() && require_some)  // "usable" (-1) with every device taken
    fail(PL_ERR_INVALID_ARGUMENT, what + ": none of the " + std::to_string(states.size()) + " visible " +
                                      kind_of(name) + " devices is usable now; occupied: " + describe_occupied(states));
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ", ") + std::to_string(id);
  rt->logger->info("usable {} devices: [{}] of {} visible", name, list, states.size());
  for (const auto& s : skipped) rt->logger->info("usable devices: skipped {}", s);
  return ids;
}

std::vector<int32_t> resolve_usable_devices(PL_Runtime* rt, const PL_DeviceSpec& spec, int32_t n,
                                            const std::string& accelerator, int32_t assume_device_count) {
  const std::string what = "devices=" + describe(spec);
  if (assume_device_count >= 0)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": usable needs the real devices, and --assume-device-count " +
                                      std::to_string(assume_device_count) +
                                      " has none to look at; check the configuration with a count or a list "
                                      "instead (e.g. --devices 2)");
  return find_usable_devices(rt, accelerator, n, nullptr, what, /*require_some=*/true);
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
      fail(PL_ERR_INVALID_ARGUMENT,
           "pl_find_usable_devices: out_ids is NULL with capacity " + std::to_string(capacity));
    if (accelerator && !*accelerator)
      fail(PL_ERR_INVALID_ARGUMENT,
           "pl_find_usable_devices: accelerator is empty; valid: an accelerator plugin's "
           "name or alias, or NULL for the default (runtime.h)");
    const std::string accel = accelerator ? accelerator : PL_USABLE_DEFAULT_ACCELERATOR;
    const auto ids = find_usable_devices(rt, accel, num_devices, options,
                                         "find_usable_devices(" + std::to_string(num_devices) + ")", false);
    *out_count = ids.size();
    if (out_ids && capacity < ids.size())
      fail(PL_ERR_INVALID_ARGUMENT, "pl_find_usable_devices: capacity " + std::to_string(capacity) +
                                        " is less than the " + std::to_string(ids.size()) + " devices found");
    if (out_ids) std::copy(ids.begin(), ids.end(), out_ids);
  });
}

}  // extern "C"
