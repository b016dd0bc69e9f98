// Lightning's `devices` argument, parsed natively (fabric's device_parser.py and the CPU
// accelerator's _parse_cpu_cores, extended with plrt's named errors).
//
//   GPU-like accelerators (devices_are_processes == false), with N available devices:
//     3 -> [0, 1, 2]     -1 / "-1" / "auto" -> [0 .. N-1]     [1, 3] -> [1, 3]
//     "3" -> [0, 1, 2]   "1, 3" -> [1, 3]   "2," -> [2]
//   CPU-like (devices_are_processes == true): a process count k > 0 (int or digit string) or
//   "auto" (1), returned as [0 .. k-1]; `available` is not an upper bound.
//
// Every bad input throws plrt::rt::Error with PL_ERR_INVALID_ARGUMENT; the message starts with
// "devices=<value as the user wrote it>" and says what would be valid.
#pragma once

#include <plrt/runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace plrt::rt {

// Counts and list lengths above this are rejected as absurd.
inline constexpr int64_t kMaxDevices = 65536;

std::vector<int32_t> parse_devices(const PL_DeviceSpec& spec, const std::string& accelerator, int32_t available,
                                   bool devices_are_processes);

// A PL_DeviceSpec that owns its storage.  spec() points into this object: keep it alive (and
// unmodified) while the returned struct is used.
struct DeviceArg {
  PL_DeviceSpecKind kind = PL_DEVICES_AUTO;
  int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  std::vector<int64_t> list;  // PL_DEVICES_LIST
  std::string text;           // PL_DEVICES_STRING (and "auto" for PL_DEVICES_AUTO)

  PL_DeviceSpec spec() const;

  static DeviceArg automatic();
  static DeviceArg of_int(int64_t value);
  static DeviceArg of_list(std::vector<int64_t> ids);
  static DeviceArg of_string(std::string text);
  static DeviceArg of_float(double value);
  static DeviceArg of_bool(bool value);
};

// The command-line text form (plrun --devices):
//   "auto"                          -> PL_DEVICES_AUTO
//   "3", "-1", "0"                  -> PL_DEVICES_INT
//   "[1, 3]", "[]", "[1, 3,]"       -> PL_DEVICES_LIST
//   "1.5", "1e2", ".5"              -> PL_DEVICES_FLOAT
//   "true", "False", ...            -> PL_DEVICES_BOOL
//   anything else ("1, 3", "2,", "", "abc") -> PL_DEVICES_STRING, checked by parse_devices.
// Surrounding whitespace is ignored when classifying.  Throws (PL_ERR_INVALID_ARGUMENT) only for a
// malformed bracketed list: "[1, x]", "[1, 3", "[1,,3]".
DeviceArg device_arg_from_text(const std::string& text);

// The spec the way the user wrote it, Python-style: 3, -1, [1, 3], '1, 3', 'auto', 1.5, True.
std::string describe(const PL_DeviceSpec& spec);

}  // namespace plrt::rt
