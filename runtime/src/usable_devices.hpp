// Choosing usable devices: Lightning's num_devices rules (its find_usable_*_devices) over the
// statuses any accelerator reports (PL_AcceleratorApi.device_status: the accelerator judges each
// of its devices, with its own reasons).  Pure functions: no device is touched.
//
// num_devices, as Lightning: 0 -> []; -1 -> every usable device (possibly none); n > the visible
// count -> an error; fewer than n usable -> an error naming each occupied device and its reason.
#pragma once

#include <plrt/runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace plrt::rt {

// One device as its accelerator reported it (a PL_DeviceStatus, copied out of the ABI struct).
struct DeviceState {
  int32_t index = 0;
  bool usable = true;
  std::string name;    // "" when unknown
  std::string reason;  // why not usable
};

// The first `num_devices` usable devices of `devices` (see the top of this file).  `what` starts
// every error ("find_usable_devices(3)", "devices='usable:3'"); `kind` names the devices in them
// ("CPU": "1 visible CPU device").  Occupied devices skipped on the way are appended to
// *skipped (may be NULL) as "1 'NVIDIA H100' (busy: ...)".
std::vector<int32_t> select_usable(const std::vector<DeviceState>& devices, int32_t num_devices,
                                   const std::string& what, const std::string& kind,
                                   std::vector<std::string>* skipped = nullptr);

// The list of occupied devices with their reasons, for an error that found too few.
std::string describe_occupied(const std::vector<DeviceState>& devices);

// devices="usable" (-1: every usable device) or "usable:N" (a PL_DEVICES_STRING or
// PL_DEVICES_TEXT spec): the N asked for, or nullopt for any other spec.  A malformed usable form
// ("usable:0", "usable:x", "usable:-2") is an error naming it and the valid forms.
std::optional<int32_t> usable_request(const PL_DeviceSpec& spec);

// PL_UsableDeviceOptions as device_status's options: "max_utilization", "max_foreign_memory_mb"
// and "probe_timeout_ms", each only when set.  The struct's size and its fields' ranges (those
// runtime.h states) are checked first, naming the field.  `options` may be NULL (no option).
struct StatusOptions {
  std::vector<std::string> keys, values;
  std::vector<PL_Option> items;  // points into keys and values
  PL_OptionList list{};
};
void status_options(const PL_UsableDeviceOptions* options, StatusOptions* out);

}  // namespace plrt::rt
