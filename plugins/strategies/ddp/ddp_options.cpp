#include "ddp_options.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "config_checks.hpp"
#include "plugin_support.hpp"

namespace plrt::ddp {

using plugin::fail;

namespace {

// The largest cap accepted: 1 TiB in MiB.  Far past any real bucket, and small enough that the
// byte count never overflows size_t.
constexpr double kMaxCapMb = 1024.0 * 1024.0;

}  // namespace

double parse_mb_option(const std::string& who, const char* key, const std::string& v, double fallback) {
  const char* s = v.c_str();
  char* end = nullptr;
  const double x = std::strtod(s, &end);
  const bool ok = !v.empty() && !std::isspace(static_cast<unsigned char>(v[0])) && *end == '\0' && std::isfinite(x) &&
                  x > 0 && x <= kMaxCapMb && DdpOptions::mib_to_bytes(x) >= 1;
  if (!ok)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": option " + key + "='" + v +
                                      "' is not valid: it must be a number of MiB > 0 (at least one byte, "
                                      "at most 1048576), e.g. 25 or 0.5; default " +
                                      std::to_string(static_cast<int>(fallback)));
  return x;
}

bool parse_bool_option(const std::string& who, const char* key, const std::string& v) {
  std::string l;
  for (char c : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "true" || l == "1" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "0" || l == "no" || l == "off") return false;
  fail(PL_ERR_INVALID_ARGUMENT,
       who + ": option " + key + "='" + v + "' is not valid: use true or false (also 1/0, yes/no, on/off)");
}

size_t DdpOptions::mib_to_bytes(double mb) { return static_cast<size_t>(mb * 1024.0 * 1024.0); }

std::string valid_option_names() {
  return "bucket_cap_mb, first_bucket_cap_mb, broadcast_buffers, pg.<name> (passed to the process group, "
         "e.g. pg.probe_ms)";
}

DdpOptions parse_options(const std::string& who, const PL_OptionList& list) {
  return parse_options(who, list, nullptr, "");
}

DdpOptions parse_options(const std::string& who, const PL_OptionList& list, const ExtraOption& extra,
                         const std::string& extra_names) {
  DdpOptions o;
  strategy::for_each_option(who, list, [&](const std::string& key, const std::string& value) {
    if (extra && extra(key, value)) return;
    if (key == "bucket_cap_mb") {
      o.bucket_cap_mb = parse_mb_option(who, "bucket_cap_mb", value, 25);
    } else if (key == "first_bucket_cap_mb") {
      o.first_bucket_cap_mb = parse_mb_option(who, "first_bucket_cap_mb", value, 1);
    } else if (key == "broadcast_buffers") {
      o.broadcast_buffers = parse_bool_option(who, "broadcast_buffers", value);
    } else if (key.rfind("pg.", 0) == 0) {
      if (key.size() == 3)
        fail(PL_ERR_INVALID_ARGUMENT, who +
                                          ": option 'pg.' names no process-group option: write pg.<name>, "
                                          "e.g. pg.probe_ms");
      o.pg_options.emplace_back(key.substr(3), value);
    } else {
      fail(PL_ERR_INVALID_ARGUMENT, who + ": unknown option '" + key + "'; valid options: " +
                                        (extra_names.empty() ? "" : extra_names + ", ") + valid_option_names());
    }
  });
  return o;
}

}  // namespace plrt::ddp
