// The device table behind device_status (device_status.cpp, usable_rules.hpp).
//
// PL_CUDA_DEVICE_TABLE=<file.json> replaces the probe entirely (a simulated machine: tests, CI, a
// login node; format in device_table.hpp).  Otherwise a child process is forked that
//   1. asks NVML (when libnvidia-ml.so.1 is there) for every GPU's compute mode, the other
//      processes on it and their memory, and its utilization, before making any context itself;
//   2. counts the devices through the CUDA runtime (CUDA_VISIBLE_DEVICES applies) and on each one
//      makes a context, allocates one byte and frees it, which is what fails on an exclusive
//      device another process holds (probe_child.cpp);
//   3. writes one JSON line per device to a pipe as it goes, and _exits.
// Why a child: a CUDA context in the calling process would break the workers it forks afterwards
// (plrun forks them, ddp_spawn forks without exec), and in exclusive mode it would itself occupy
// the device.  The parent waits at most `timeout`; then it kills the child (SIGKILL, reaped: no
// zombie) and reports the devices that had not answered as occupied ("no answer within ...").
// A child that dies after some devices answered is reported the same way; one that dies before
// saying how many devices there are is an error.  The child logs nothing (the host's logger may
// be locked by a thread that did not survive the fork); the caller logs the table's notes.
//
// run_probe is the process handling alone, over any body, so that the tests can make a probe hang,
// crash or fail on cue without a GPU (tests/runtime/test_cuda_probe.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device_table.hpp"

namespace plrt::cuda {

inline constexpr std::chrono::milliseconds kDefaultProbeTimeout{30000};

// What a probe body reports, in order: header() once, then device() for devices 0, 1, ... (note()
// may come between them).  Each call is one line on the pipe, sent at once, so that what a
// hanging or crashing body said before it stopped is kept.
class ProbeSink {
 public:
  explicit ProbeSink(int fd) : fd_(fd) {}
  void header(int32_t visible, const std::string& reason, const std::vector<std::string>& notes);
  void device(const DeviceRecord& device);
  void note(const std::string& text);

 private:
  int fd_;
};

// Runs in the child.  An exception it throws becomes the probe's error (the child exits 1).
using ProbeBody = std::function<void(ProbeSink&)>;

// Forks, runs `body` in the child, and builds the table from what it sent within `timeout`.
// Throws plrt::plugin::Failure when the child said nothing usable (PL_ERR_TIMEOUT when it ran out
// of time before the header, PL_ERR_RUNTIME when it failed or died, PL_ERR_RESOURCE when it could
// not be started).
DeviceTable run_probe(const ProbeBody& body, std::chrono::milliseconds timeout);

// The real probe: run_probe with the NVML and CUDA body (probe_child.cpp).
DeviceTable probe_cuda_devices(std::chrono::milliseconds timeout);

}  // namespace plrt::cuda
