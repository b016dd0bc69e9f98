// The "cuda" accelerator plugin (alias "gpu"): device enumeration honouring CUDA_VISIBLE_DEVICES,
// device memory, pinned host memory, copies, streams and events, through the CUDA runtime.
//
// Without a driver or a GPU, cudaGetDeviceCount returns an error and leaves its output untouched:
// availability() checks the return code and reports zero devices with the runtime's reason, so
// nothing else in plrt needs libcuda.so.1 to start.  The element-wise kernels (fill, axpy, fused
// optimizers, quantisation) are the GPU issue's work; until then their entries are NULL and the
// runtime reports them as unsupported.
#include "plugin_support.hpp"

#include <plrt/pl_plugin.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

struct PL_Accelerator {
  const PL_Host* host;  // borrowed; outlives the instance
};
// Streams and events are the CUDA handles themselves, cast through these opaque types.

namespace {

using plrt::plugin::fail;
using plrt::plugin::guard;

void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error state
  fail(rc == cudaErrorMemoryAllocation ? PL_ERR_RESOURCE : PL_ERR_RUNTIME,
       "cuda: " + what + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
}

// A NULL instance breaks the ABI's rule 6 and leaves no host to report through: say so and
// stop, as the cpu plugin does, rather than pretend the call succeeded.
template <class Body>
PL_Error* run(PL_Accelerator* acc, Body&& body) {
  if (acc == nullptr || acc->host == nullptr) {
    std::fprintf(stderr, "plrt cuda accelerator: called with a NULL accelerator instance; aborting\n");
    std::abort();
  }
  return guard(acc->host, std::forward<Body>(body));
}

int device_count_or_zero(std::string* reason) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);  // leaves n untouched on error
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
    return 0;
  }
  if (n == 0 && reason) *reason = "the CUDA runtime sees no device (check CUDA_VISIBLE_DEVICES)";
  return n;
}

void check_index(int32_t index) {
  int n = device_count_or_zero(nullptr);
  if (index < 0 || index >= n)
    fail(PL_ERR_INVALID_ARGUMENT, "cuda: device index " + std::to_string(index) + " is out of range; " +
                                      (n ? "valid: 0.." + std::to_string(n - 1) : std::string("no CUDA device is available")));
}

void check_device(PL_Device d, const char* what) {
  if (d.type == PL_DEVICE_CPU) return;
  if (d.type != PL_DEVICE_CUDA)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("cuda: ") + what + ": device type " + std::to_string(d.type) +
                                      " is neither cpu (1) nor cuda (2)");
  check_index(d.index);
}

PL_Error* cuda_create(const PL_Host* host, const PL_OptionList* options, PL_Accelerator** out) {
  if (host == nullptr || out == nullptr) return nullptr;
  return guard(host, [&] {
    *out = nullptr;
    if (options && options->count > 0)
      fail(PL_ERR_INVALID_ARGUMENT, std::string("cuda: unknown option '") + options->items[0].key +
                                        "'; the cuda accelerator takes no options");
    *out = new PL_Accelerator{host};
  });
}

void cuda_destroy(PL_Accelerator* acc) { delete acc; }

PL_Error* cuda_availability(PL_Accelerator* acc, PL_DeviceAvailability* out) {
  return run(acc, [&] {
    std::string reason;
    out->device_count = device_count_or_zero(&reason);
    std::snprintf(out->reason, sizeof out->reason, "%s", reason.c_str());
  });
}

PL_Error* cuda_device_info(PL_Accelerator* acc, int32_t index, PL_DeviceInfo* out) {
  return run(acc, [&] {
    check_index(index);
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties(" + std::to_string(index) + ")");
    std::snprintf(out->name, sizeof out->name, "%.127s", prop.name);
    out->total_memory = prop.totalGlobalMem;
    out->compute_major = prop.major;
    out->compute_minor = prop.minor;
    int previous = 0;
    check_cuda(cudaGetDevice(&previous), "cudaGetDevice");
    check_cuda(cudaSetDevice(index), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    cudaError_t rc = cudaMemGetInfo(&free_b, &total_b);
    cudaSetDevice(previous);
    check_cuda(rc, "cudaMemGetInfo");
    out->free_memory = free_b;
  });
}

PL_Error* cuda_set_device(PL_Accelerator* acc, int32_t index) {
  return run(acc, [&] {
    check_index(index);
    check_cuda(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
  });
}

PL_Error* cuda_alloc(PL_Accelerator* acc, PL_Device device, size_t bytes, void** out) {
  return run(acc, [&] {
    *out = nullptr;
    if (device.type != PL_DEVICE_CUDA)
      fail(PL_ERR_INVALID_ARGUMENT, "cuda: alloc needs a cuda device; use alloc_host for host memory");
    check_index(device.index);
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    if (bytes > 0) check_cuda(cudaMalloc(out, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
  });
}

PL_Error* cuda_free(PL_Accelerator* acc, PL_Device, void* ptr) {
  return run(acc, [&] {
    if (ptr) check_cuda(cudaFree(ptr), "cudaFree");
  });
}

PL_Error* cuda_alloc_host(PL_Accelerator* acc, size_t bytes, void** out) {
  return run(acc, [&] {
    *out = nullptr;
    if (bytes > 0) check_cuda(cudaMallocHost(out, bytes), "cudaMallocHost(" + std::to_string(bytes) + " bytes)");
  });
}

PL_Error* cuda_free_host(PL_Accelerator* acc, void* ptr) {
  return run(acc, [&] {
    if (ptr) check_cuda(cudaFreeHost(ptr), "cudaFreeHost");
  });
}

PL_Error* cuda_copy(PL_Accelerator* acc, void* dst, PL_Device dst_dev, const void* src, PL_Device src_dev,
                    size_t bytes, PL_Stream* stream) {
  return run(acc, [&] {
    check_device(dst_dev, "copy destination");
    check_device(src_dev, "copy source");
    if (bytes == 0) return;
    if (!dst || !src) fail(PL_ERR_INVALID_ARGUMENT, "cuda: copy of " + std::to_string(bytes) + " bytes with a NULL pointer");
    // Unified addressing: cudaMemcpyDefault infers the direction from the pointers.
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, reinterpret_cast<cudaStream_t>(stream)),
               "cudaMemcpyAsync");
    if (stream == nullptr) check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  });
}

PL_Error* cuda_stream_create(PL_Accelerator* acc, PL_Device device, PL_Stream** out) {
  return run(acc, [&] {
    check_index(device.index);
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    *out = reinterpret_cast<PL_Stream*>(s);
  });
}

PL_Error* cuda_stream_destroy(PL_Accelerator* acc, PL_Stream* s) {
  return run(acc, [&] { check_cuda(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s)), "cudaStreamDestroy"); });
}

PL_Error* cuda_stream_synchronize(PL_Accelerator* acc, PL_Stream* s) {
  return run(acc, [&] {
    check_cuda(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
  });
}

PL_Error* cuda_event_create(PL_Accelerator* acc, PL_Device device, PL_Event** out) {
  return run(acc, [&] {
    check_index(device.index);
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    *out = reinterpret_cast<PL_Event*>(e);
  });
}

PL_Error* cuda_event_destroy(PL_Accelerator* acc, PL_Event* e) {
  return run(acc, [&] { check_cuda(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e)), "cudaEventDestroy"); });
}

PL_Error* cuda_event_record(PL_Accelerator* acc, PL_Event* e, PL_Stream* s) {
  return run(acc, [&] {
    check_cuda(cudaEventRecord(reinterpret_cast<cudaEvent_t>(e), reinterpret_cast<cudaStream_t>(s)), "cudaEventRecord");
  });
}

PL_Error* cuda_event_synchronize(PL_Accelerator* acc, PL_Event* e) {
  return run(acc, [&] { check_cuda(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(e)), "cudaEventSynchronize"); });
}

PL_Error* cuda_stream_wait_event(PL_Accelerator* acc, PL_Stream* s, PL_Event* e) {
  return run(acc, [&] {
    check_cuda(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(s), reinterpret_cast<cudaEvent_t>(e), 0),
               "cudaStreamWaitEvent");
  });
}

PL_AcceleratorApi make_api() {
  PL_AcceleratorApi api{};  // kernels stay NULL until the GPU issue: reported as unsupported
  api.struct_size = sizeof api;
  api.device_type = PL_DEVICE_CUDA;
  api.flags = 0;
  api.create = cuda_create;
  api.destroy = cuda_destroy;
  api.availability = cuda_availability;
  api.device_info = cuda_device_info;
  api.set_device = cuda_set_device;
  api.alloc = cuda_alloc;
  api.free_memory = cuda_free;
  api.alloc_host = cuda_alloc_host;
  api.free_host = cuda_free_host;
  api.copy = cuda_copy;
  api.stream_create = cuda_stream_create;
  api.stream_destroy = cuda_stream_destroy;
  api.stream_synchronize = cuda_stream_synchronize;
  api.event_create = cuda_event_create;
  api.event_destroy = cuda_event_destroy;
  api.event_record = cuda_event_record;
  api.event_synchronize = cuda_event_synchronize;
  api.stream_wait_event = cuda_stream_wait_event;
  return api;
}

const PL_AcceleratorApi kApi = make_api();

const PL_Alias kAliases[] = {
    {sizeof(PL_Alias), "gpu", "Lightning's accelerator=\"gpu\": NVIDIA GPUs through CUDA", {sizeof(PL_OptionList), nullptr, 0}}};

const PL_Plugin kPlugin = {sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_ACCELERATOR, "cuda", "0.1.0",
                           "NVIDIA GPUs through the CUDA runtime (honours CUDA_VISIBLE_DEVICES)", kAliases, 1, &kApi};

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
