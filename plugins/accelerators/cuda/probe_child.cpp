// The device probe's body, run in the forked child (device_probe.hpp): NVML first, then a context
// and a one-byte allocation on every visible device through the CUDA runtime, each device
// reported as soon as it is known.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cuda_common.hpp"
#include "device_probe.hpp"
#include "nvml.hpp"
#include "visible_devices.hpp"

namespace plrt::cuda {
namespace {

// Lightning's check, a tensor on the device, plus the properties for the name.  What fails on an
// exclusive device another process holds, or on a broken one, is the reason it is occupied.
void try_context(int32_t index, DeviceRecord* d) {
  try {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties(" + std::to_string(index) + ")");
    d->name.assign(prop.name, strnlen(prop.name, sizeof prop.name));
    check_cuda(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, 1), "cudaMalloc(1 bytes)");
    check_cuda(cudaFree(p), "cudaFree");
  } catch (const plrt::plugin::Failure& f) {
    d->context_ok = false;
    d->context_error = f.message;
  }
}

void probe_body(ProbeSink& sink, std::vector<int64_t> exclude) {
  exclude.push_back(static_cast<int64_t>(::getpid()));
  // NVML first: the contexts made below must not show up as "other processes" or utilization.
  NvmlSnapshot nv = nvml_snapshot(exclude);
  std::vector<std::string> notes = nv.notes;

  std::string reason;
  const int32_t count = device_count_or_zero(&reason);
  if (!nv.available && count > 0)  // without devices the reason says enough
    notes.push_back("NVML is not available (" + nv.error +
                    "): compute modes, other processes' memory and "
                    "utilization are not checked, only whether a context can be made");

  std::vector<std::string> uuids;
  for (const auto& d : nv.devices) uuids.push_back(d.uuid);
  std::vector<std::optional<size_t>> map;
  if (nv.available) map = map_visible_to_nvml(std::getenv("CUDA_VISIBLE_DEVICES"), uuids, size_t(count), &notes);
  map.resize(size_t(count));
  sink.header(count, count ? "" : reason, notes);

  for (int32_t i = 0; i < count; ++i) {
    DeviceRecord d;
    d.index = i;
    try_context(i, &d);
    if (map[size_t(i)] && *map[size_t(i)] < nv.devices.size()) {
      const NvmlDeviceState& s = nv.devices[*map[size_t(i)]];
      if (!d.name.empty() && !s.name.empty() && d.name != s.name) {
        // CUDA's and NVML's numbering differ (see visible_devices.hpp): NVML's data would be another GPU's.
        sink.note("CUDA device " + std::to_string(i) + " is '" + d.name + "' but NVML device " +
                  std::to_string(*map[size_t(i)]) + " is '" + s.name +
                  "': its processes and utilization are not checked (set CUDA_DEVICE_ORDER=PCI_BUS_ID)");
      } else {
        if (d.name.empty()) d.name = s.name;
        d.uuid = s.uuid;
        d.compute_mode = s.compute_mode;
        d.processes = s.processes;
        d.utilization_percent = s.utilization_percent;
      }
    }
    sink.device(d);
  }
}

}  // namespace

DeviceTable probe_cuda_devices(std::chrono::milliseconds timeout) {
  // The caller is not "another process" on any device.
  const std::vector<int64_t> exclude = {static_cast<int64_t>(::getpid())};
  return run_probe([exclude](ProbeSink& sink) { probe_body(sink, exclude); }, timeout);
}

}  // namespace plrt::cuda
