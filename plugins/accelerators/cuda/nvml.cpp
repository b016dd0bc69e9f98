// NVML through libnvidia-ml.so.1 loaded at run time (dlopen), so that plrt has no build
// dependency on nvml.h or the driver.  The few types and prototypes below are declared by hand
// from NVML's documented, versioned C ABI (the _v2/_v3 symbol suffixes exist precisely so that
// these layouts never change): nvmlReturn_t and the compute-mode enum are ints, nvmlDevice_t an
// opaque pointer, nvmlProcessInfo_t {pid, usedGpuMemory, gpuInstanceId, computeInstanceId} for the
// _v2/_v3 process queries and {pid, usedGpuMemory} for the unsuffixed (v1) ones.
#include "nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <functional>

namespace plrt::cuda {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;
constexpr unsigned int kNameBuffer = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned int kUuidBuffer = 96;  // >= NVML_DEVICE_UUID_V2_BUFFER_SIZE (80)

struct nvmlProcessInfo_v1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2 {  // the _v2 and _v3 queries' nvmlProcessInfo_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct nvmlUtilization {
  unsigned int gpu;  // percent of the last sample period with a kernel running
  unsigned int memory;
};

ComputeMode to_mode(int m) {
  switch (m) {  // NVML_COMPUTEMODE_*
    case 0:
      return ComputeMode::kDefault;
    case 1:
      return ComputeMode::kExclusiveThread;
    case 2:
      return ComputeMode::kProhibited;
    case 3:
      return ComputeMode::kExclusiveProcess;
    default:
      return ComputeMode::kUnknown;
  }
}

// The library's symbols; the handle is closed when the snapshot is done.
class Nvml {
 public:
  explicit Nvml(void* lib) : lib_(lib) { error_string_ = fn<const char*(nvmlReturn_t)>("nvmlErrorString"); }
  template <class Sig>
  Sig* fn(const char* name) const {  // nullptr when this driver lacks it
    return reinterpret_cast<Sig*>(dlsym(lib_, name));
  }
  std::string error(const char* what, nvmlReturn_t rc) const {
    const char* s = error_string_ ? error_string_(rc) : nullptr;
    return std::string(what) + ": " + (s ? s : "error " + std::to_string(rc));
  }

 private:
  void* lib_;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
};

// One process query (compute or graphics) in its newest form this driver has.
template <class Info>
bool query_processes(const std::function<nvmlReturn_t(unsigned int*, Info*)>& call, std::vector<ForeignProcess>* out,
                     nvmlReturn_t* rc) {
  std::vector<Info> buf(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int n = static_cast<unsigned int>(buf.size());
    *rc = call(&n, buf.data());
    if (*rc == NVML_ERROR_INSUFFICIENT_SIZE) {  // processes came and went: ask again, with room
      buf.resize(std::max<size_t>(n, buf.size()) + 16);
      continue;
    }
    if (*rc != NVML_SUCCESS) return false;
    for (unsigned int i = 0; i < n && i < buf.size(); ++i) {
      ForeignProcess p;
      p.pid = buf[i].pid;
      if (buf[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) p.used_bytes = buf[i].usedGpuMemory;
      out->push_back(p);
    }
    return true;
  }
  return false;
}

void processes(const Nvml& nv, nvmlDevice_t dev, const char* kind, NvmlDeviceState* d, std::vector<std::string>* notes,
               size_t index) {
  using V2 = nvmlReturn_t(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2*);
  using V1 = nvmlReturn_t(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v1*);
  const std::string base = std::string("nvmlDeviceGet") + kind + "RunningProcesses";
  nvmlReturn_t rc = NVML_SUCCESS;
  bool ok = false;
  std::string used;
  if (auto* f = nv.fn<V2>((base + "_v3").c_str()); f || (f = nv.fn<V2>((base + "_v2").c_str()))) {
    used = base;
    ok = query_processes<nvmlProcessInfo_v2>([&](unsigned int* n, nvmlProcessInfo_v2* b) { return f(dev, n, b); },
                                             &d->processes, &rc);
  } else if (auto* g = nv.fn<V1>(base.c_str())) {
    used = base;
    ok = query_processes<nvmlProcessInfo_v1>([&](unsigned int* n, nvmlProcessInfo_v1* b) { return g(dev, n, b); },
                                             &d->processes, &rc);
  } else {
    notes->push_back("NVML has no " + base + ": other processes on the GPUs are not seen");
    return;
  }
  if (!ok) notes->push_back("NVML device " + std::to_string(index) + ": " + nv.error(used.c_str(), rc));
}

}  // namespace

NvmlSnapshot nvml_snapshot(const std::vector<int64_t>& exclude) {
  NvmlSnapshot snap;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    snap.error = std::string("libnvidia-ml.so.1 cannot be loaded (") + (why ? why : "dlopen failed") + ")";
    return snap;
  }
  struct Closer {
    void* lib;
    ~Closer() { dlclose(lib); }
  } closer{lib};
  try {
    Nvml nv(lib);
    auto* init = nv.fn<nvmlReturn_t()>("nvmlInit_v2");
    auto* shutdown = nv.fn<nvmlReturn_t()>("nvmlShutdown");
    auto* count_fn = nv.fn<nvmlReturn_t(unsigned int*)>("nvmlDeviceGetCount_v2");
    auto* handle_fn = nv.fn<nvmlReturn_t(unsigned int, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
    auto* name_fn = nv.fn<nvmlReturn_t(nvmlDevice_t, char*, unsigned int)>("nvmlDeviceGetName");
    auto* uuid_fn = nv.fn<nvmlReturn_t(nvmlDevice_t, char*, unsigned int)>("nvmlDeviceGetUUID");
    auto* mode_fn = nv.fn<nvmlReturn_t(nvmlDevice_t, int*)>("nvmlDeviceGetComputeMode");
    auto* util_fn = nv.fn<nvmlReturn_t(nvmlDevice_t, nvmlUtilization*)>("nvmlDeviceGetUtilizationRates");
    if (!init || !count_fn || !handle_fn) {
      snap.error = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2";
      return snap;
    }
    if (nvmlReturn_t rc = init(); rc != NVML_SUCCESS) {
      snap.error = nv.error("nvmlInit_v2", rc);
      return snap;
    }
    unsigned int count = 0;
    if (nvmlReturn_t rc = count_fn(&count); rc != NVML_SUCCESS) {
      snap.error = nv.error("nvmlDeviceGetCount_v2", rc);
      if (shutdown) shutdown();
      return snap;
    }
    snap.available = true;
    for (unsigned int i = 0; i < count; ++i) {
      NvmlDeviceState d;
      nvmlDevice_t dev = nullptr;
      if (nvmlReturn_t rc = handle_fn(i, &dev); rc != NVML_SUCCESS) {
        snap.notes.push_back("NVML device " + std::to_string(i) + ": " + nv.error("nvmlDeviceGetHandleByIndex_v2", rc));
        snap.devices.push_back(d);  // keeps NVML's numbering
        continue;
      }
      char buf[kUuidBuffer > kNameBuffer ? kUuidBuffer : kNameBuffer] = {};
      if (name_fn && name_fn(dev, buf, kNameBuffer) == NVML_SUCCESS) d.name = buf;
      buf[0] = '\0';
      if (uuid_fn && uuid_fn(dev, buf, kUuidBuffer) == NVML_SUCCESS) d.uuid = buf;
      int mode = -1;
      if (mode_fn && mode_fn(dev, &mode) == NVML_SUCCESS) d.compute_mode = to_mode(mode);
      nvmlUtilization util{};
      // NOT_SUPPORTED on some boards (and MIG): the utilization stays unknown, not 0.
      if (util_fn && util_fn(dev, &util) == NVML_SUCCESS) d.utilization_percent = util.gpu;
      processes(nv, dev, "Compute", &d, &snap.notes, i);
      processes(nv, dev, "Graphics", &d, &snap.notes, i);
      // A process with both kinds of context shows twice; the caller and the probe are not "others".
      std::vector<ForeignProcess> unique;
      for (const auto& p : d.processes) {
        if (std::find(exclude.begin(), exclude.end(), p.pid) != exclude.end()) continue;
        auto same = std::find_if(unique.begin(), unique.end(), [&](const ForeignProcess& q) { return q.pid == p.pid; });
        if (same == unique.end())
          unique.push_back(p);
        else if (p.used_bytes)
          same->used_bytes = std::max(same->used_bytes.value_or(0), *p.used_bytes);
      }
      d.processes = std::move(unique);
      snap.devices.push_back(std::move(d));
    }
    if (shutdown) shutdown();
  } catch (const std::exception& e) {
    snap.available = false;
    snap.error = std::string("NVML failed: ") + e.what();
  }
  return snap;
}

}  // namespace plrt::cuda
