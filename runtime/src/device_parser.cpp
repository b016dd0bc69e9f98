// Lightning's `devices` parsing; see device_parser.hpp for the accepted forms.
#include "device_parser.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "error.hpp"

namespace plrt::rt {
namespace {

constexpr const char* kGpuValid =
    "valid: an int k (the first k devices), -1 or \"-1\" (all), a list of indices, a string like "
    "\"1, 3\", or \"auto\"";

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

enum class IntParse {
  kOk,
  kNotInt,
  kOverflow
};

// Python's int() on a trimmed piece, minus underscores: [+-]?[0-9]+.
IntParse parse_int(std::string_view s, int64_t* out) {
  s = trim(s);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return IntParse::kNotInt;
  uint64_t value = 0;
  bool overflow = false;
  for (char c : s) {
    if (!is_digit(c)) return IntParse::kNotInt;
    if (value > (UINT64_MAX - 9) / 10) overflow = true;  // keep scanning: "99..9x" is not an int
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (overflow || value > static_cast<uint64_t>(INT64_MAX)) return IntParse::kOverflow;
  *out = negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  return IntParse::kOk;
}

// Numeric text that is not an integer: [+-]? (d+ [. d*] | . d+) ([eE] [+-]? d+)?, with a '.' or
// an exponent.
bool looks_like_float(std::string_view s) {
  s = trim(s);
  if (s.find_first_of(".eE") == std::string_view::npos) return false;
  size_t i = 0, digits = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  while (i < s.size() && is_digit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t start = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == start) return false;
  }
  return i == s.size();
}

bool is_bool_word(std::string_view s, bool* value) {
  s = trim(s);
  if (s == "true" || s == "True") return *value = true, true;
  if (s == "false" || s == "False") return *value = false, true;
  return false;
}

std::string quote(std::string_view s) {  // Python repr of a str, long ones shortened
  const bool use_double = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  size_t n = 0;
  for (char c : s) {
    if (++n > 200) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + q;
}

std::string float_repr(double v) {  // Python's repr(float): shortest round trip
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[40];
  for (int p = 0; p < 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);  // [-]d[.ddd]e[+-]xx
  std::string sign;
  if (s[0] == '-') sign = "-", s.erase(0, 1);
  const size_t epos = s.find('e');
  const int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits = s.substr(0, epos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  if (v == 0.0) return sign + "0.0";
  if (exp >= 16 || exp < -4) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + m + e;
  }
  if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  const size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string render_ids(const int64_t* ids, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i == 16 && n > 17) {
      out += ", ... (" + std::to_string(n) + " in all)";
      break;
    }
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

std::string plural(int64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// What the spec asks for, before it is checked against the accelerator.
struct Form {
  enum What {
    kAuto,
    kAll,
    kCount,
    kIndices
  } what = kAuto;
  int64_t count = 0;
  std::vector<int64_t> ids;
};

struct Ctx {
  std::string prefix;  // "devices=<as written>"
  std::string accel;
  std::string valid;  // the hint for this accelerator
  [[noreturn]] void bad(const std::string& rest) const { fail(PL_ERR_INVALID_ARGUMENT, prefix + rest + "; " + valid); }
};

Form parse_string(std::string_view raw, const Ctx& c) {
  const std::string_view s = trim(raw);
  Form f;
  if (s == "auto") return f;
  if (s == "-1") return f.what = Form::kAll, f;
  bool b = false;
  if (is_bool_word(s, &b)) c.bad(" is a bool");
  if (s == "usable" || s.substr(0, 7) == "usable:")  // needs the devices themselves: find_usable.cpp
    c.bad(
        " picks the devices that are free now, which only resolving a job (pl_runtime_resolve_job, plrun, "
        "pl::Trainer) or pl_find_usable_devices can do, not parsing alone");
  if (s.find(',') == std::string_view::npos) {
    if (s.empty()) c.bad(" is not a valid input using the " + c.accel + " accelerator (it selects no device)");
    if (looks_like_float(s)) c.bad(" is a float");
    const IntParse r = parse_int(s, &f.count);
    if (r == IntParse::kOverflow)
      c.bad(": '" + std::string(s) + "' is too large (at most " + std::to_string(kMaxDevices) + ")");
    if (r == IntParse::kNotInt) c.bad(": '" + std::string(s) + "' is not an integer");
    f.what = f.count == -1 ? Form::kAll : Form::kCount;
    return f;
  }
  f.what = Form::kIndices;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    const std::string_view piece = trim(s.substr(start, end - start));
    start = end + 1;
    if (piece.empty()) continue;  // "2," and "1,,3": empty pieces are dropped
    int64_t v = 0;
    const IntParse r = parse_int(piece, &v);
    if (r == IntParse::kOverflow) c.bad(": device index '" + std::string(piece) + "' is too large");
    if (r == IntParse::kNotInt) c.bad(": '" + std::string(piece) + "' is not an integer");
    f.ids.push_back(v);
    if (static_cast<int64_t>(f.ids.size()) > kMaxDevices) break;
  }
  return f;
}

Form parse_form(const PL_DeviceSpec& spec, const Ctx& c) {
  Form f;
  switch (spec.kind) {
    case PL_DEVICES_AUTO:
      return f;
    case PL_DEVICES_INT:
      f.what = spec.int_value == -1 ? Form::kAll : Form::kCount;
      f.count = spec.int_value;
      return f;
    case PL_DEVICES_LIST:
      if (spec.list == nullptr && spec.list_len > 0)
        fail(PL_ERR_INVALID_ARGUMENT,
             "devices: a list of " + std::to_string(spec.list_len) + " indices with a NULL list pointer");
      f.what = Form::kIndices;
      if (spec.list_len > static_cast<size_t>(kMaxDevices))
        c.bad(": a list of " + std::to_string(spec.list_len) + " indices is too long (at most " +
              std::to_string(kMaxDevices) + ")");
      if (spec.list_len) f.ids.assign(spec.list, spec.list + spec.list_len);
      return f;
    case PL_DEVICES_STRING:
      if (spec.string == nullptr)
        fail(PL_ERR_INVALID_ARGUMENT, "devices: a string spec (PL_DEVICES_STRING) with a NULL string; " + c.valid);
      return parse_string(spec.string, c);
    case PL_DEVICES_FLOAT:
      c.bad(" is a float");
    case PL_DEVICES_BOOL:
      c.bad(" is a bool");
    default:
      fail(PL_ERR_INVALID_ARGUMENT,
           "devices: unknown spec kind " + std::to_string(spec.kind) +
               "; valid kinds: PL_DEVICES_AUTO (0), PL_DEVICES_INT (1), PL_DEVICES_LIST (2), "
               "PL_DEVICES_STRING (3), PL_DEVICES_FLOAT (4), PL_DEVICES_BOOL (5), PL_DEVICES_TEXT (6)");
  }
}

std::vector<int32_t> first(int64_t k) {
  std::vector<int32_t> out(static_cast<size_t>(k));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(i);
  return out;
}

std::vector<int32_t> as_processes(const Form& f, const Ctx& c) {
  switch (f.what) {
    case Form::kAuto:
      return first(1);
    case Form::kAll:
      c.bad(": " + c.accel + " takes a number of processes > 0 (-1, \"all devices\", is for GPU-like accelerators)");
    case Form::kIndices:
      if (f.ids.empty()) c.bad(" is not a valid input using the " + c.accel + " accelerator (it asks for no process)");
      c.bad(": the " + c.accel + " accelerator takes a number of processes, not a list of indices");
    case Form::kCount:
      break;
  }
  if (f.count == 0) c.bad(" is not a valid input using the " + c.accel + " accelerator (it asks for 0 processes)");
  if (f.count < 0) c.bad(": " + c.accel + " takes a number of processes > 0");
  if (f.count > kMaxDevices)
    c.bad(": " + std::to_string(f.count) + " processes is too many (at most " + std::to_string(kMaxDevices) + ")");
  return first(f.count);
}

std::vector<int32_t> as_devices(const Form& f, const Ctx& c, int32_t available) {
  const std::string zero = " is not a valid input using the " + c.accel + " accelerator (it selects no device)";
  // Checks of the value itself come first: they do not depend on the machine.
  if (f.what == Form::kCount) {
    if (f.count == 0) c.bad(zero);
    if (f.count < 0) c.bad(": " + std::to_string(f.count) + " is negative; only -1 (all devices) may be");
    if (f.count > kMaxDevices)
      c.bad(": " + std::to_string(f.count) + " devices is too many (at most " + std::to_string(kMaxDevices) + ")");
  }
  if (f.what == Form::kIndices) {
    if (f.ids.empty()) c.bad(zero);
    for (int64_t id : f.ids) {
      if (id == -1) c.bad(": -1 (all devices) must stand alone, not inside a list of indices");
      if (id < 0) c.bad(": device index " + std::to_string(id) + " is negative; indices start at 0");
    }
    std::unordered_map<int64_t, int> seen;
    for (int64_t id : f.ids) ++seen[id];
    for (int64_t id : f.ids) {
      const int n = seen[id];
      if (n > 1)
        fail(PL_ERR_INVALID_ARGUMENT, c.prefix + ": device index " + std::to_string(id) + " appears " +
                                          (n == 2 ? std::string("twice") : std::to_string(n) + " times") +
                                          "; each index may be used once");
    }
  }
  if (available < 0)
    fail(PL_ERR_INVALID_ARGUMENT, c.prefix + ": the " + c.accel + " accelerator reported a negative device count (" +
                                      std::to_string(available) + ")");
  if (available == 0)
    fail(PL_ERR_INVALID_ARGUMENT, c.prefix + ": no " + c.accel + " device is available (the " + c.accel +
                                      " accelerator reports 0 devices); --accelerator cpu runs on the CPU instead");
  const std::string has = "the " + c.accel + " accelerator has " + plural(available, "device");
  switch (f.what) {
    case Form::kAuto:
    case Form::kAll:
      if (available > kMaxDevices)
        fail(PL_ERR_INVALID_ARGUMENT, c.prefix + ": " + has + ", more than plrt supports (" +
                                          std::to_string(kMaxDevices) + "); ask for a count or list instead");
      return first(available);
    case Form::kCount:
      if (f.count > available)
        fail(PL_ERR_INVALID_ARGUMENT, c.prefix + ": you requested " + plural(f.count, "device") + " but " + has +
                                          "; valid: a count " +
                                          (available == 1 ? std::string("of 1") : "1.." + std::to_string(available)) +
                                          ", or -1 or \"auto\" for all of them");
      return first(f.count);
    case Form::kIndices:
      break;
  }
  for (int64_t id : f.ids) {
    if (id >= available)
      fail(PL_ERR_INVALID_ARGUMENT, c.prefix + ": you requested devices " + render_ids(f.ids.data(), f.ids.size()) +
                                        " but " + has +
                                        (available == 1 ? std::string(" (valid index 0)")
                                                        : " (valid indices 0.." + std::to_string(available - 1) + ")"));
  }
  return std::vector<int32_t>(f.ids.begin(), f.ids.end());
}

}  // namespace

std::vector<int32_t> parse_devices(const PL_DeviceSpec& spec, const std::string& accelerator, int32_t available,
                                   bool devices_are_processes) {
  if (spec.kind == PL_DEVICES_TEXT) {  // command-line text: read it as plrun does, then parse that
    if (spec.string == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, "devices: a text spec (PL_DEVICES_TEXT) with a NULL string");
    const DeviceArg arg = device_arg_from_text(spec.string);
    return parse_devices(arg.spec(), accelerator, available, devices_are_processes);
  }
  Ctx c;
  c.accel = accelerator.empty() ? std::string("selected") : accelerator;
  c.prefix = "devices=" + describe(spec);
  c.valid = devices_are_processes ? "valid for the " + c.accel +
                                        " accelerator: a number of processes k > 0 (an int like 4 or a "
                                        "string like \"4\"), or \"auto\" (1 process)"
                                  : std::string(kGpuValid);
  const Form f = parse_form(spec, c);
  return devices_are_processes ? as_processes(f, c) : as_devices(f, c, available);
}

std::string describe(const PL_DeviceSpec& spec) {
  switch (spec.kind) {
    case PL_DEVICES_AUTO:
      return "'auto'";
    case PL_DEVICES_INT:
      return std::to_string(spec.int_value);
    case PL_DEVICES_LIST:
      if (spec.list == nullptr && spec.list_len > 0) return "[<NULL list of " + std::to_string(spec.list_len) + ">]";
      return render_ids(spec.list, spec.list_len);
    case PL_DEVICES_STRING:
      return spec.string ? quote(spec.string) : std::string("<NULL string>");
    case PL_DEVICES_FLOAT:
      return float_repr(spec.float_value);
    case PL_DEVICES_BOOL:
      return spec.bool_value ? "True" : "False";
    case PL_DEVICES_TEXT:
      return spec.string ? quote(spec.string) : std::string("<NULL string>");
    default:
      return "<unknown kind " + std::to_string(spec.kind) + ">";
  }
}

PL_DeviceSpec DeviceArg::spec() const {
  PL_DeviceSpec s{};
  s.struct_size = sizeof(PL_DeviceSpec);
  s.kind = kind;
  s.int_value = int_value;
  s.float_value = float_value;
  s.bool_value = bool_value ? 1 : 0;
  s.list = list.empty() ? nullptr : list.data();
  s.list_len = list.size();
  s.string = (kind == PL_DEVICES_STRING || kind == PL_DEVICES_AUTO) ? text.c_str() : nullptr;
  return s;
}

DeviceArg DeviceArg::automatic() {
  DeviceArg a;
  a.text = "auto";
  return a;
}
// clang-format off
DeviceArg DeviceArg::of_int(int64_t v) { DeviceArg a; a.kind = PL_DEVICES_INT; a.int_value = v; return a; }
DeviceArg DeviceArg::of_list(std::vector<int64_t> v) { DeviceArg a; a.kind = PL_DEVICES_LIST; a.list = std::move(v); return a; }
DeviceArg DeviceArg::of_string(std::string v) { DeviceArg a; a.kind = PL_DEVICES_STRING; a.text = std::move(v); return a; }
DeviceArg DeviceArg::of_float(double v) { DeviceArg a; a.kind = PL_DEVICES_FLOAT; a.float_value = v; return a; }
DeviceArg DeviceArg::of_bool(bool v) { DeviceArg a; a.kind = PL_DEVICES_BOOL; a.bool_value = v; return a; }
// clang-format on

DeviceArg device_arg_from_text(const std::string& text) {
  const std::string_view s = trim(text);
  if (s == "auto") return DeviceArg::automatic();
  int64_t v = 0;
  if (parse_int(s, &v) == IntParse::kOk) return DeviceArg::of_int(v);
  if (looks_like_float(s)) return DeviceArg::of_float(std::strtod(std::string(s).c_str(), nullptr));
  bool b = false;
  if (is_bool_word(s, &b)) return DeviceArg::of_bool(b);
  if (s.empty() || s.front() != '[') return DeviceArg::of_string(text);

  const std::string prefix = "devices=" + std::string(s);
  const std::string hint = "; a list holds device indices, like [1, 3] or []";
  if (s.back() != ']' || s.size() < 2) fail(PL_ERR_INVALID_ARGUMENT, prefix + ": the list has no closing ']'" + hint);
  const std::string_view inner = trim(s.substr(1, s.size() - 2));
  std::vector<int64_t> ids;
  size_t start = 0;
  while (!inner.empty() && start <= inner.size()) {
    size_t end = inner.find(',', start);
    const bool last = end == std::string_view::npos;
    if (last) end = inner.size();
    const std::string_view piece = trim(inner.substr(start, end - start));
    start = end + 1;
    if (piece.empty()) {
      if (last && !ids.empty()) break;  // one trailing comma, as Python allows: [1, 3,]
      fail(PL_ERR_INVALID_ARGUMENT, prefix + ": the list has an empty entry" + hint);
    }
    const IntParse r = parse_int(piece, &v);
    if (r == IntParse::kOverflow)
      fail(PL_ERR_INVALID_ARGUMENT, prefix + ": '" + std::string(piece) + "' is too large" + hint);
    if (r == IntParse::kNotInt)
      fail(PL_ERR_INVALID_ARGUMENT, prefix + ": '" + std::string(piece) + "' is not an integer" + hint);
    ids.push_back(v);
    if (static_cast<int64_t>(ids.size()) > kMaxDevices)
      fail(PL_ERR_INVALID_ARGUMENT,
           prefix + ": the list is too long (at most " + std::to_string(kMaxDevices) + " indices)");
  }
  return DeviceArg::of_list(std::move(ids));
}

}  // namespace plrt::rt
