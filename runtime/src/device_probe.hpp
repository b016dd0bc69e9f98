// The device table behind the usable-device check (usable_devices.hpp).
//
// PL_CUDA_DEVICE_TABLE=<file.json> replaces the probe entirely (a simulated machine: tests, CI, a
// login node; format in device_table.hpp).  Otherwise a child process is forked that
//   1. asks NVML (when libnvidia-ml.so.1 is there) for every GPU's compute mode, the other
//      processes on it and their memory, and its utilization, before making any context itself;
//   2. loads nothing new but uses the cuda accelerator plugin the parent found by name: counts
//      the devices (CUDA_VISIBLE_DEVICES applies) and on each one makes a context, allocates one
//      byte and frees it, which is what fails on an exclusive device another process holds;
//   3. writes one JSON line per device to a pipe as it goes, and _exits.
// Why a child: a CUDA context in the calling process would break the workers it forks afterwards
// (plrun forks them, ddp_spawn forks without exec), and in exclusive mode it would itself occupy
// the device.  The parent waits at most `timeout`; then it kills the child (SIGKILL, reaped: no
// zombie) and reports the devices that had not answered as occupied ("no answer within ...").
// A child that dies after some devices answered is reported the same way; one that dies before
// saying how many devices there are is an error.  The child logs nothing (the runtime's logger
// may be locked by a thread that did not survive the fork); the parent logs its notes.
//
// Without the cuda plugin, or without a driver or a GPU, the table has no device and says why.
#pragma once

#include "device_table.hpp"

#include <plrt/runtime.h>

#include <chrono>

namespace plrt::rt {

inline constexpr std::chrono::milliseconds kDefaultProbeTimeout{30000};

// PL_CUDA_DEVICE_TABLE's table when it is set (a bad file is an error naming it), else the probe.
DeviceTable cuda_device_table(PL_Runtime* runtime, std::chrono::milliseconds timeout);

// The real probe (never the simulated table).
DeviceTable probe_cuda_devices(PL_Runtime* runtime, std::chrono::milliseconds timeout);

}  // namespace plrt::rt
