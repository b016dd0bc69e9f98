// Choosing usable devices from the statuses an accelerator reports; see usable_devices.hpp.
#include "usable_devices.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "device_parser.hpp"
#include "error.hpp"

namespace plrt::rt {
namespace {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string label(const DeviceState& d) {
  return std::to_string(d.index) + (d.name.empty() ? std::string() : " '" + d.name + "'");
}

std::string render(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::string plural(size_t n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

std::string describe_occupied(const std::vector<DeviceState>& devices) {
  std::string out;
  for (const auto& d : devices)
    if (!d.usable) out += (out.empty() ? "" : "; ") + label(d) + " (" + d.reason + ")";
  return out;
}

std::vector<int32_t> select_usable(const std::vector<DeviceState>& devices, int32_t n, const std::string& what,
                                   const std::string& kind, std::vector<std::string>* skipped) {
  if (n < -1)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": " + std::to_string(n) +
                                      " is not a number of devices; valid: n >= 1, 0 (none) or -1 (every usable one)");
  if (n == 0) return {};
  const size_t visible = devices.size();
  if (visible == 0) fail(PL_ERR_INVALID_ARGUMENT, what + ": no " + kind + " device is visible");
  if (n > 0 && size_t(n) > visible)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": you requested " + plural(size_t(n), "device") +
                                      " but this machine has only " + plural(visible, "visible " + kind + " device") +
                                      "; valid: 1.." + std::to_string(visible) + ", or -1 for every usable one");
  std::vector<int32_t> ids;
  for (const auto& d : devices) {
    if (n > 0 && ids.size() == size_t(n)) break;  // as Lightning: the first n usable ones
    if (!d.usable) {
      if (skipped) skipped->push_back(label(d) + " (" + d.reason + ")");
      continue;
    }
    ids.push_back(d.index);
  }
  if (n > 0 && ids.size() < size_t(n))
    fail(PL_ERR_INVALID_ARGUMENT,
         what + ": you requested " + plural(size_t(n), "usable device") + " but only " + std::to_string(ids.size()) +
             " of the " + plural(visible, "visible " + kind + " device") + (ids.size() == 1 ? " is" : " are") +
             " usable" + (ids.empty() ? std::string() : " (" + render(ids) + ")") +
             "; occupied: " + describe_occupied(devices));
  return ids;
}

std::optional<int32_t> usable_request(const PL_DeviceSpec& spec) {
  if (spec.struct_size == 0 || (spec.kind != PL_DEVICES_STRING && spec.kind != PL_DEVICES_TEXT) || !spec.string)
    return std::nullopt;
  const std::string_view s = trim(spec.string);
  if (s == "usable") return -1;
  if (s.substr(0, 7) != "usable:") return std::nullopt;
  const std::string prefix = "devices=" + describe(spec);
  const std::string valid =
      "; valid: \"usable:N\" (the first N usable devices, N >= 1) or \"usable\" "
      "(every usable one, also \"usable:-1\")";
  const std::string count(trim(s.substr(7)));
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(count.c_str(), &end, 10);
  if (count.empty() || end == count.c_str() || *end != '\0' || errno == ERANGE)
    fail(PL_ERR_INVALID_ARGUMENT, prefix + ": '" + count + "' is not an integer" + valid);
  if (n == 0) fail(PL_ERR_INVALID_ARGUMENT, prefix + " selects no device" + valid);
  if (n < -1) fail(PL_ERR_INVALID_ARGUMENT, prefix + ": " + std::to_string(n) + " is negative" + valid);
  if (n > kMaxDevices)
    fail(PL_ERR_INVALID_ARGUMENT,
         prefix + ": " + std::to_string(n) + " devices is too many (at most " + std::to_string(kMaxDevices) + ")");
  return static_cast<int32_t>(n);
}

void status_options(const PL_UsableDeviceOptions* o, StatusOptions* out) {
  *out = StatusOptions{};
  out->list.struct_size = sizeof out->list;
  if (o == nullptr) return;
  if (o->struct_size < PL_STRUCT_SIZE(PL_UsableDeviceOptions, probe_timeout_ms))
    fail(PL_ERR_VERSION, "PL_UsableDeviceOptions.struct_size " + std::to_string(o->struct_size) +
                             " is too small (this runtime's is " + std::to_string(sizeof *o) + ")");
  if (o->has_max_utilization) {
    const double v = o->max_utilization_percent;
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    if (!(v >= 0 && v <= 100))  // NaN fails too
      fail(PL_ERR_INVALID_ARGUMENT, std::string("PL_UsableDeviceOptions.max_utilization_percent is ") + text +
                                        "; valid: a percentage from 0 to 100");
    out->keys.push_back("max_utilization");
    out->values.push_back(text);
  }
  if (o->has_max_foreign_memory) {
    const int64_t v = o->max_foreign_memory_mb;
    if (v < 0 || v > (int64_t(1) << 40))
      fail(PL_ERR_INVALID_ARGUMENT, "PL_UsableDeviceOptions.max_foreign_memory_mb is " + std::to_string(v) +
                                        "; valid: a whole number of MiB from 0 to 1099511627776");
    out->keys.push_back("max_foreign_memory_mb");
    out->values.push_back(std::to_string(v));
  }
  if (o->probe_timeout_ms > 0) {  // <= 0: the accelerator's default
    out->keys.push_back("probe_timeout_ms");
    out->values.push_back(std::to_string(o->probe_timeout_ms));
  }
  for (size_t i = 0; i < out->keys.size(); ++i)
    out->items.push_back(PL_Option{sizeof(PL_Option), out->keys[i].c_str(), out->values[i].c_str()});
  out->list.items = out->items.empty() ? nullptr : out->items.data();
  out->list.count = out->items.size();
}

}  // namespace plrt::rt
