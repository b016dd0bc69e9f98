#include "horovod_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "config_checks.hpp"
#include "plugin_support.hpp"

namespace plrt::horovod {

using plugin::fail;

namespace {

constexpr double kMaxThresholdMb = 1024.0 * 1024.0;  // 1 TiB
constexpr double kMaxCycleMs = 60000.0;              // a minute: far beyond any step's backward

const char* const kValid =
    "fusion_threshold_mb, cycle_time_ms, op, gradient_predivide_factor, scale_lr, broadcast_buffers, pg.<name> "
    "(passed to the process group)";

// A finite decimal number in [lo, hi] (`name` is the option or the variable, `hint` what it means).
double parse_number(const std::string& who, const std::string& name, const std::string& v, double lo, double hi,
                    const std::string& hint) {
  const char* s = v.c_str();
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(s, &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || x < lo || x > hi || v[0] == ' ')
    fail(PL_ERR_INVALID_ARGUMENT, who + ": " + name + "='" + v + "' is not valid: " + hint);
  return x;
}

std::string range(double lo, double hi) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "a number from %g to %g", lo, hi);
  return buf;
}

}  // namespace

size_t HorovodOptions::fusion_threshold_bytes() const {
  return static_cast<size_t>(fusion_threshold_mb * 1024.0 * 1024.0);
}

HorovodOptions parse_options(const std::string& who, const PL_OptionList& list, EnvLookup env) {
  HorovodOptions o;
  bool threshold_given = false, cycle_given = false;
  std::string op = "average", predivide;
  strategy::for_each_option(who, list, [&](const std::string& key, const std::string& value) {
    if (key == "fusion_threshold_mb") {
      o.fusion_threshold_mb =
          parse_number(who, "option fusion_threshold_mb", value, 0, kMaxThresholdMb,
                       range(0, kMaxThresholdMb) + " (MiB; 0: no fusion, each gradient alone), default 128");
      threshold_given = true;
    } else if (key == "cycle_time_ms") {
      o.cycle_time_ms =
          parse_number(who, "option cycle_time_ms", value, 0, kMaxCycleMs, range(0, kMaxCycleMs) + " ms, default 1");
      cycle_given = true;
    } else if (key == "op") {
      if (value != "average" && value != "sum")
        fail(PL_ERR_INVALID_ARGUMENT, who + ": option op='" + value +
                                          "' is not valid: use average (default: the gradients' mean over the ranks) "
                                          "or sum (adasum is not built)");
      op = value;
    } else if (key == "gradient_predivide_factor") {
      o.predivide = parse_number(who, "option gradient_predivide_factor", value, 1e-30, 1e30,
                                 "a number > 0 (divide by it before the sum, multiply by it / world size after), "
                                 "default 1");
      predivide = value;
    } else if (key == "scale_lr") {
      o.scale_lr = ddp::parse_bool_option(who, "scale_lr", value);
    } else if (key == "broadcast_buffers") {
      o.ddp.broadcast_buffers = ddp::parse_bool_option(who, "broadcast_buffers", value);
    } else if (key.rfind("pg.", 0) == 0 && key.size() > 3) {
      o.ddp.pg_options.emplace_back(key.substr(3), value);
    } else {
      fail(PL_ERR_INVALID_ARGUMENT, who + ": unknown option '" + key + "'; valid options: " + kValid);
    }
  });
  o.average = op == "average";
  if (!o.average && o.predivide != 1.0)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": option gradient_predivide_factor='" + predivide +
                                      "' needs op=average (it divides before the sum and multiplies by f / world "
                                      "size after); with op=sum leave it at 1");
  if (threshold_given) {
    o.threshold_from = "option fusion_threshold_mb";
  } else if (const char* v = env ? env("HOROVOD_FUSION_THRESHOLD") : nullptr; v && *v) {
    const double bytes = parse_number(who, "HOROVOD_FUSION_THRESHOLD", v, 0, kMaxThresholdMb * 1024 * 1024,
                                      "Horovod's fusion threshold is a byte count from 0 (no fusion) to 2^40");
    o.fusion_threshold_mb = bytes / (1024.0 * 1024.0);
    o.threshold_from = "HOROVOD_FUSION_THRESHOLD";
  }
  if (cycle_given) {
    o.cycle_from = "option cycle_time_ms";
  } else if (const char* v = env ? env("HOROVOD_CYCLE_TIME") : nullptr; v && *v) {
    o.cycle_time_ms = parse_number(who, "HOROVOD_CYCLE_TIME", v, 0, kMaxCycleMs,
                                   "Horovod's cycle time is " + range(0, kMaxCycleMs) + " milliseconds");
    o.cycle_from = "HOROVOD_CYCLE_TIME";
  }
  return o;
}

}  // namespace plrt::horovod
