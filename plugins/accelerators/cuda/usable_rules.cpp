// When a CUDA device is usable: the settings and the reasons; see usable_rules.hpp.
#include "usable_rules.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "plugin_support.hpp"

namespace plrt::cuda {
namespace {

using plrt::plugin::fail;

const char* kUtilEnv = "PL_USABLE_MAX_UTILIZATION";
const char* kMemEnv = "PL_USABLE_MAX_FOREIGN_MEMORY_MB";
const char* kUtilOption = "max_utilization";
const char* kMemOption = "max_foreign_memory_mb";
const char* kTimeoutOption = "probe_timeout_ms";
constexpr long long kMaxTimeoutMs = 24LL * 3600 * 1000;

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

// `origin` names where the text came from: "PL_USABLE_MAX_UTILIZATION='x'", "max_utilization='x'".
double parse_utilization(const std::string& v, const std::string& origin) {
  const std::string valid =
      "; valid: a percentage from 0 to 100 (default " + format_number(kDefaultMaxUtilization) + ")";
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE)
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is not a number" + valid);
  if (!(d >= 0 && d <= 100))  // NaN fails too
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is " + format_number(d) + valid);
  return d;
}

uint64_t parse_memory_mib(const std::string& v, const std::string& origin) {
  const std::string valid = "; valid: a whole number of MiB from 0 to 1099511627776 (default " +
                            std::to_string(kDefaultMaxForeignMemoryMiB) + ")";
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE)
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is not a whole number" + valid);
  if (n < 0 || n > (1LL << 40))  // 1 EiB: anything above is a mistake, and overflows bytes
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is " + std::to_string(n) + valid);
  return uint64_t(n) << 20;
}

std::chrono::milliseconds parse_timeout(const std::string& v, const std::string& origin) {
  const std::string valid =
      "; valid: a whole number of milliseconds from 1 to " + std::to_string(kMaxTimeoutMs) + " (default 30000)";
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE)
    fail(PL_ERR_INVALID_ARGUMENT, origin + " is not a whole number" + valid);
  if (n < 1 || n > kMaxTimeoutMs) fail(PL_ERR_INVALID_ARGUMENT, origin + " is " + std::to_string(n) + valid);
  return std::chrono::milliseconds(n);
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

}  // namespace

std::string format_bytes(uint64_t bytes) {
  char buf[48];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / double(uint64_t(1) << 30));
  else
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>((bytes + (1 << 19)) >> 20));
  return buf;
}

UsableSettings usable_settings(const PL_OptionList* options, const EnvLookup& env) {
  UsableSettings s;
  bool util_set = false, mem_set = false;
  if (options && options->count > 0 && options->items == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT,
         "cuda: device_status: options has " + std::to_string(options->count) + " items but items is NULL");
  for (size_t i = 0; options && i < options->count; ++i) {
    const PL_Option& o = options->items[i];
    const std::string key = o.key ? o.key : "";
    const std::string value(trim(o.value ? o.value : ""));
    const std::string origin = "cuda: device_status option " + key + "='" + value + "'";
    if (key == kUtilOption) {
      s.thresholds.max_utilization_percent = parse_utilization(value, origin);
      util_set = true;
    } else if (key == kMemOption) {
      s.thresholds.max_foreign_memory_bytes = parse_memory_mib(value, origin);
      mem_set = true;
    } else if (key == kTimeoutOption) {
      s.probe_timeout = parse_timeout(value, origin);
    } else {
      fail(PL_ERR_INVALID_ARGUMENT, "cuda: device_status: unknown option '" + key + "'; valid: " + kUtilOption +
                                        " (percent), " + kMemOption + " (MiB), " + kTimeoutOption);
    }
  }
  // The environment fills in what the options left unset; empty (or blank) is unset.
  auto from_env = [&](const char* name) -> std::optional<std::string> {
    const char* v = env ? env(name) : nullptr;
    if (v == nullptr || trim(v).empty()) return std::nullopt;
    return std::string(trim(v));
  };
  if (auto v = util_set ? std::nullopt : from_env(kUtilEnv))
    s.thresholds.max_utilization_percent = parse_utilization(*v, std::string(kUtilEnv) + "='" + *v + "'");
  if (auto v = mem_set ? std::nullopt : from_env(kMemEnv))
    s.thresholds.max_foreign_memory_bytes = parse_memory_mib(*v, std::string(kMemEnv) + "='" + *v + "'");
  return s;
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
    return "busy: " + format_bytes(foreign) + " used by other processes (" + process_list(d.processes) +
           "), more than " + std::to_string(t.max_foreign_memory_bytes >> 20) + " MiB (" + kMemEnv + ")";
  if (d.utilization_percent && *d.utilization_percent > t.max_utilization_percent)
    return "busy: " + format_number(*d.utilization_percent) + "% utilization, more than " +
           format_number(t.max_utilization_percent) + "% (" + kUtilEnv + ")";
  return std::nullopt;
}

}  // namespace plrt::cuda
