// Choosing usable devices from a table; see usable_devices.hpp.
#include "usable_devices.hpp"

#include "device_parser.hpp"
#include "error.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace plrt::rt {
namespace {

const char* kUtilEnv = "PL_USABLE_MAX_UTILIZATION";
const char* kMemEnv = "PL_USABLE_MAX_FOREIGN_MEMORY_MB";

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

double check_utilization(double v, const std::string& origin) {
  if (!(v >= 0 && v <= 100))  // NaN fails too
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is " + format_number(v) +
                                      "; valid: a percentage from 0 to 100 (default " +
                                      format_number(kDefaultMaxUtilization) + ")");
  return v;
}

uint64_t check_memory_mib(int64_t v, const std::string& origin) {
  if (v < 0 || v > (int64_t(1) << 40))  // 1 EiB: anything above is a mistake, and overflows bytes
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is " + std::to_string(v) +
                                      "; valid: a whole number of MiB from 0 to 1099511627776 (default " +
                                      std::to_string(kDefaultMaxForeignMemoryMiB) + ")");
  return uint64_t(v) << 20;
}

std::string env_text(const EnvLookup& env, const char* name, bool* set) {
  const char* v = env ? env(name) : nullptr;
  *set = v != nullptr && !trim(v).empty();
  return v ? std::string(trim(v)) : std::string();
}

std::string process_list(const std::vector<ForeignProcess>& ps) {
  std::string out;
  size_t n = 0;
  for (const auto& p : ps) {
    if (++n > 4) {
      out += ", ... (" + std::to_string(ps.size()) + " processes)";
      break;
    }
    out += (out.empty() ? "pid " : ", pid ") + std::to_string(p.pid);
    if (p.used_bytes) out += ": " + format_bytes(*p.used_bytes);
  }
  return out;
}

std::string label(const DeviceRecord& d) {
  return std::to_string(d.index) + (d.name.empty() ? std::string() : " '" + d.name + "'");
}

std::string render(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::string plural(size_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

std::string thresholds_text(const UsableThresholds& t) {
  return "occupied means: compute mode prohibited, exclusive and held, no context, more than " +
         std::to_string(t.max_foreign_memory_bytes >> 20) + " MiB used by other processes (" + kMemEnv +
         ") or more than " +
         format_number(t.max_utilization_percent) + "% utilization (" + kUtilEnv + ")";
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  char buf[48];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / double(uint64_t(1) << 30));
  else
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>((bytes + (1 << 19)) >> 20));
  return buf;
}

UsableThresholds usable_thresholds(const PL_UsableDeviceOptions* o, const EnvLookup& env) {
  UsableThresholds t;
  if (o && o->struct_size < PL_STRUCT_SIZE(PL_UsableDeviceOptions, probe_timeout_ms))
    fail(PL_ERR_VERSION, "PL_UsableDeviceOptions.struct_size " + std::to_string(o->struct_size) +
                             " is too small (this runtime's is " + std::to_string(sizeof *o) + ")");
  bool set = false;
  if (o && o->has_max_utilization) {
    t.max_utilization_percent = check_utilization(o->max_utilization_percent, "max_utilization_percent");
  } else if (std::string v = env_text(env, kUtilEnv, &set); set) {
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || errno == ERANGE)
      fail(PL_ERR_INVALID_ARGUMENT, std::string(kUtilEnv) + "='" + v +
                                        "' is not a number; valid: a percentage from 0 to 100 (default " +
                                        format_number(kDefaultMaxUtilization) + ")");
    t.max_utilization_percent = check_utilization(d, std::string(kUtilEnv) + "='" + v + "'");
  }
  if (o && o->has_max_foreign_memory) {
    t.max_foreign_memory_bytes = check_memory_mib(o->max_foreign_memory_mb, "max_foreign_memory_mb");
  } else if (std::string v = env_text(env, kMemEnv, &set); set) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || errno == ERANGE)
      fail(PL_ERR_INVALID_ARGUMENT, std::string(kMemEnv) + "='" + v +
                                        "' is not a whole number; valid: MiB from 0 to 1099511627776 (default " +
                                        std::to_string(kDefaultMaxForeignMemoryMiB) + ")");
    t.max_foreign_memory_bytes = check_memory_mib(n, std::string(kMemEnv) + "='" + v + "'");
  }
  return t;
}

std::optional<std::string> why_unusable(const DeviceRecord& d, const UsableThresholds& t) {
  if (d.compute_mode == ComputeMode::kProhibited) return std::string("compute mode prohibited (no process may use it)");
  const bool exclusive =
      d.compute_mode == ComputeMode::kExclusiveProcess || d.compute_mode == ComputeMode::kExclusiveThread;
  if (exclusive && (!d.processes.empty() || !d.context_ok)) {
    std::string why = "exclusive mode, held by another process";
    if (!d.processes.empty()) why += " (" + process_list(d.processes) + ")";
    return why;
  }
  if (!d.context_ok) return "cannot create a context: " + d.context_error;
  uint64_t foreign = 0;
  for (const auto& p : d.processes) foreign += p.used_bytes.value_or(0);
  if (foreign > t.max_foreign_memory_bytes)
    return "busy: " + format_bytes(foreign) + " used by other processes (" + process_list(d.processes) + ")";
  if (d.utilization_percent && *d.utilization_percent > t.max_utilization_percent)
    return "busy: " + format_number(*d.utilization_percent) + "% utilization";
  return std::nullopt;
}

std::string describe_occupied(const DeviceTable& table, const UsableThresholds& t) {
  std::string out;
  for (const auto& d : table.devices)
    if (auto why = why_unusable(d, t)) out += (out.empty() ? "" : "; ") + label(d) + " (" + *why + ")";
  return out;
}

std::vector<int32_t> select_usable(const DeviceTable& table, int32_t n, const UsableThresholds& t,
                                   const std::string& what, std::vector<std::string>* skipped) {
  if (n < -1)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": " + std::to_string(n) +
                                      " is not a number of devices; valid: n >= 1, 0 (none) or -1 (every usable one)");
  if (n == 0) return {};
  const size_t visible = table.devices.size();
  if (visible == 0)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": no CUDA device is visible" +
                                      (table.reason.empty() ? std::string() : " (" + table.reason + ")") +
                                      "; --accelerator cpu runs on the CPU instead");
  if (n > 0 && size_t(n) > visible)
    fail(PL_ERR_INVALID_ARGUMENT, what + ": you requested " + plural(size_t(n), "device") + " but this machine has only " +
                                      plural(visible, "visible CUDA device") + "; valid: 1.." + std::to_string(visible) +
                                      ", or -1 for every usable one");
  std::vector<int32_t> ids;
  for (const auto& d : table.devices) {
    if (n > 0 && ids.size() == size_t(n)) break;  // as Lightning: the first n usable ones
    if (auto why = why_unusable(d, t)) {
      if (skipped) skipped->push_back(label(d) + " (" + *why + ")");
      continue;
    }
    ids.push_back(d.index);
  }
  if (n > 0 && ids.size() < size_t(n))
    fail(PL_ERR_INVALID_ARGUMENT,
         what + ": you requested " + plural(size_t(n), "usable device") + " but only " + std::to_string(ids.size()) +
             " of the " + plural(visible, "visible CUDA device") + (ids.size() == 1 ? " is" : " are") + " usable" +
             (ids.empty() ? std::string() : " (" + render(ids) + ")") + "; occupied: " + describe_occupied(table, t) +
             " [" + thresholds_text(t) + "]");
  return ids;
}

std::optional<int32_t> usable_request(const PL_DeviceSpec& spec) {
  if (spec.struct_size == 0 || (spec.kind != PL_DEVICES_STRING && spec.kind != PL_DEVICES_TEXT) || !spec.string)
    return std::nullopt;
  const std::string_view s = trim(spec.string);
  if (s == "usable") return -1;
  if (s.substr(0, 7) != "usable:") return std::nullopt;
  const std::string prefix = "devices=" + describe(spec);
  const std::string valid = "; valid: \"usable:N\" (the first N usable CUDA devices, N >= 1) or \"usable\" "
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
    fail(PL_ERR_INVALID_ARGUMENT, prefix + ": " + std::to_string(n) + " devices is too many (at most " +
                                      std::to_string(kMaxDevices) + ")");
  return static_cast<int32_t>(n);
}

}  // namespace plrt::rt
