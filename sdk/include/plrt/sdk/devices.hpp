// pl::Devices: Lightning's `devices` argument in its every form (int, list, string, "auto"), and
// the forms Lightning rejects (float, bool) so that they get the same clear error.
#pragma once

#include <cstdint>
#include <plrt/sdk/error.hpp>
#include <string>
#include <vector>

namespace pl {

class Devices {
 public:
  Devices(int k) : kind_(PL_DEVICES_INT), int_(k) {}        // NOLINT: implicit, as in Lightning
  Devices(long long k) : kind_(PL_DEVICES_INT), int_(k) {}  // NOLINT
  Devices(std::vector<int64_t> ids) : kind_(PL_DEVICES_LIST), list_(std::move(ids)) {}  // NOLINT
  Devices(std::initializer_list<int64_t> ids) : kind_(PL_DEVICES_LIST), list_(ids) {}   // NOLINT
  Devices(const char* s) : kind_(PL_DEVICES_STRING), str_(s) {}                         // NOLINT
  Devices(std::string s) : kind_(PL_DEVICES_STRING), str_(std::move(s)) {}              // NOLINT
  Devices(double f) : kind_(PL_DEVICES_FLOAT), float_(f) {}                             // NOLINT: rejected when parsed
  Devices(bool b) : kind_(PL_DEVICES_BOOL), bool_(b) {}                                 // NOLINT: rejected when parsed
  static Devices automatic() { return Devices("auto"); }
  // Command-line text, read as plrun reads --devices ("2", "[1, 3]", "1, 3", "auto", ...).
  static Devices from_text(std::string text) {
    Devices d(std::move(text));
    d.kind_ = PL_DEVICES_TEXT;
    return d;
  }

  PL_DeviceSpec spec() const {
    PL_DeviceSpec s{};
    s.struct_size = sizeof s;
    s.kind = kind_;
    s.int_value = int_;
    s.float_value = float_;
    s.bool_value = bool_ ? 1 : 0;
    s.list = list_.data();
    s.list_len = list_.size();
    s.string = str_.c_str();
    return s;
  }

  // Parses for an accelerator with `available` devices (see pl_parse_devices).
  std::vector<int> parse(const std::string& accelerator, int available, bool devices_are_processes) const {
    PL_DeviceSpec s = spec();
    size_t n = 0;
    check(pl_parse_devices(&s, accelerator.c_str(), available, devices_are_processes, nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    check(pl_parse_devices(&s, accelerator.c_str(), available, devices_are_processes, ids.data(), ids.size(), &n));
    return {ids.begin(), ids.end()};
  }

 private:
  PL_DeviceSpecKind kind_;
  int64_t int_ = 0;
  double float_ = 0;
  bool bool_ = false;
  std::vector<int64_t> list_;
  std::string str_;
};

// Keeps a Devices alive while its C view is in use.
class DeviceSpecHolder {
 public:
  explicit DeviceSpecHolder(Devices d) : d_(std::move(d)) {}
  PL_DeviceSpec spec() const { return d_.spec(); }

 private:
  Devices d_;
};

}  // namespace pl
