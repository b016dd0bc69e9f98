// The "cuda" accelerator plugin (alias "gpu"): device enumeration honouring CUDA_VISIBLE_DEVICES,
// device memory, pinned host memory, copies, streams and events through the CUDA runtime, every
// kernel of the ABI (entries.hpp), which mirror the cpu reference kernels on the GPU, and which
// devices are usable now (device_status.hpp: NVML and a context probe in a forked child).
//
// Without a driver or a GPU, cudaGetDeviceCount returns an error and leaves its output untouched:
// availability() checks the return code and reports zero devices with the reason, so nothing else
// in plrt needs libcuda.so.1 to start.  The CUDA runtime is linked statically and cuBLAS is opened
// on the first gemm, so the plugin loads wherever its file can be read.
//
// Kernels run asynchronously on the stream given (NULL: the device's legacy default stream).
// Errors that only the data shows (quantize_u8's non-finite values, dequantize_u8's invalid
// min/max) are reported by the next synchronisation through this instance: stream_synchronize,
// event_synchronize, or a copy on the default stream (kernel_checks.hpp).
#include <plrt/pl_plugin.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "arg_checks.hpp"
#include "device_scope.hpp"
#include "device_status.hpp"
#include "entries.hpp"
#include "instance.hpp"

namespace {

using plrt::cuda::check_cuda;
using plrt::cuda::check_device_index;
using plrt::cuda::cuda_stream;
using plrt::cuda::run;
using plrt::plugin::fail;
using plrt::plugin::guard;

template <class T>
void require_out(T* out, const char* fn) {
  if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, std::string("cuda: ") + fn + ": out is NULL");
}

// Writes `value` into the caller's struct: as many bytes as both sides know (the caller declares
// its size in out->struct_size); out->struct_size becomes the number of bytes written.
template <class T>
void write_out(T* out, T value, size_t v1_size, const char* fn, const char* type) {
  require_out(out, fn);
  if (out->struct_size < v1_size)
    fail(PL_ERR_VERSION, std::string("cuda: ") + fn + ": " + type + ".struct_size " + std::to_string(out->struct_size) +
                             " is smaller than the v1 size " + std::to_string(v1_size) + "; set it to sizeof(" + type +
                             ")");
  const size_t n = out->struct_size < sizeof(T) ? out->struct_size : sizeof(T);
  value.struct_size = n;
  std::memcpy(static_cast<void*>(out), &value, n);
}

// A device of a memory call: the host, or a visible CUDA device.
void check_device(PL_Device d, const char* what) {
  if (d.type == PL_DEVICE_CPU) return;
  if (d.type != PL_DEVICE_CUDA)
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string("cuda: ") + what + ": device type " + std::to_string(d.type) + " is neither cpu (1) nor cuda (2)");
  check_device_index(d.index, std::string("cuda: ") + what + " is cuda:" + std::to_string(d.index));
}

// ---- lifecycle ----

PL_Error* cuda_create(const PL_Host* host, const PL_OptionList* options, PL_Accelerator** out) {
  if (host == nullptr) {
    std::fprintf(stderr, "plrt cuda accelerator: create called with a NULL host; aborting\n");
    std::abort();
  }
  return guard(host, [&] {
    require_out(out, "create");
    *out = nullptr;
    if (options && options->count > 0)
      fail(PL_ERR_INVALID_ARGUMENT,
           std::string("cuda: unknown option '") + options->items[0].key + "'; the cuda accelerator takes no options");
    *out = new PL_Accelerator(host);
  });
}

void cuda_destroy(PL_Accelerator* acc) { delete acc; }

// ---- devices ----

PL_Error* cuda_availability(PL_Accelerator* acc, PL_DeviceAvailability* out) {
  return run(acc, [&] {
    PL_DeviceAvailability a{};
    std::string reason;
    a.device_count = plrt::cuda::device_count_or_zero(&reason);
    std::snprintf(a.reason, sizeof a.reason, "%s", reason.c_str());
    write_out(out, a, PL_STRUCT_SIZE(PL_DeviceAvailability, reason), "availability", "PL_DeviceAvailability");
  });
}

PL_Error* cuda_device_info(PL_Accelerator* acc, int32_t index, PL_DeviceInfo* out) {
  return run(acc, [&] {
    require_out(out, "device_info");
    check_device_index(index, "cuda: device_info: device index " + std::to_string(index) + " was asked for");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties(" + std::to_string(index) + ")");
    PL_DeviceInfo info{};
    std::snprintf(info.name, sizeof info.name, "%.127s", prop.name);
    info.total_memory = prop.totalGlobalMem;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    int previous = 0;
    check_cuda(cudaGetDevice(&previous), "cudaGetDevice");
    check_cuda(cudaSetDevice(index), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    const cudaError_t rc = cudaMemGetInfo(&free_b, &total_b);
    cudaSetDevice(previous);
    check_cuda(rc, "cudaMemGetInfo");
    info.free_memory = free_b;
    write_out(out, info, PL_STRUCT_SIZE(PL_DeviceInfo, compute_minor), "device_info", "PL_DeviceInfo");
  });
}

PL_Error* cuda_set_device(PL_Accelerator* acc, int32_t index) {
  return run(acc, [&] {
    check_device_index(index, "cuda: set_device: device index " + std::to_string(index) + " was asked for");
    check_cuda(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
  });
}

// ---- memory ----

PL_Error* cuda_alloc(PL_Accelerator* acc, PL_Device device, size_t bytes, void** out) {
  return run(acc, [&] {
    require_out(out, "alloc");
    *out = nullptr;
    if (device.type != PL_DEVICE_CUDA)
      fail(PL_ERR_INVALID_ARGUMENT, "cuda: alloc needs a cuda device, not " + plrt::kernel_args::device_name(device) +
                                        "; use alloc_host for host memory");
    check_device(device, "alloc device");
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
    require_out(out, "alloc_host");
    *out = nullptr;
    if (bytes > 0) check_cuda(cudaMallocHost(out, bytes), "cudaMallocHost(" + std::to_string(bytes) + " bytes)");
  });
}

PL_Error* cuda_free_host(PL_Accelerator* acc, void* ptr) {
  return run(acc, [&] {
    if (ptr) check_cuda(cudaFreeHost(ptr), "cudaFreeHost");
  });
}

// Asynchronous on a stream; on the default stream (NULL) it waits, and then reports the errors
// that earlier kernels found in their data.
PL_Error* cuda_copy(PL_Accelerator* acc, void* dst, PL_Device dst_dev, const void* src, PL_Device src_dev, size_t bytes,
                    PL_Stream* stream) {
  return run(acc, [&] {
    check_device(dst_dev, "copy destination");
    check_device(src_dev, "copy source");
    if (bytes == 0) return;
    if (!dst || !src)
      fail(PL_ERR_INVALID_ARGUMENT, "cuda: copy of " + std::to_string(bytes) + " bytes with a NULL pointer");
    // Unified addressing: cudaMemcpyDefault infers the direction from the pointers.
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream(stream)), "cudaMemcpyAsync");
    if (stream == nullptr) {
      check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
      acc->checks.report("copy");
    }
  });
}

// ---- streams and events ----

PL_Error* cuda_stream_create(PL_Accelerator* acc, PL_Device device, PL_Stream** out) {
  return run(acc, [&] {
    require_out(out, "stream_create");
    *out = nullptr;
    check_device_index(device.index, "cuda: stream_create: the device is cuda:" + std::to_string(device.index));
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    *out = reinterpret_cast<PL_Stream*>(s);
  });
}

PL_Error* cuda_stream_destroy(PL_Accelerator* acc, PL_Stream* s) {
  return run(acc, [&] {
    if (s == nullptr) return;  // the default stream is not ours to destroy
    acc->blas.forget_stream(cuda_stream(s));
    check_cuda(cudaStreamDestroy(cuda_stream(s)), "cudaStreamDestroy");
  });
}

PL_Error* cuda_stream_synchronize(PL_Accelerator* acc, PL_Stream* s) {
  return run(acc, [&] {
    check_cuda(cudaStreamSynchronize(cuda_stream(s)), "cudaStreamSynchronize");
    acc->checks.report("stream_synchronize");
  });
}

PL_Error* cuda_event_create(PL_Accelerator* acc, PL_Device device, PL_Event** out) {
  return run(acc, [&] {
    require_out(out, "event_create");
    *out = nullptr;
    check_device_index(device.index, "cuda: event_create: the device is cuda:" + std::to_string(device.index));
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    *out = reinterpret_cast<PL_Event*>(e);
  });
}

PL_Error* cuda_event_destroy(PL_Accelerator* acc, PL_Event* e) {
  return run(acc, [&] {
    if (e == nullptr) return;  // like free(NULL)
    check_cuda(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e)), "cudaEventDestroy");
  });
}

PL_Error* cuda_event_record(PL_Accelerator* acc, PL_Event* e, PL_Stream* s) {
  return run(acc, [&] {
    if (e == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "cuda: event_record: event is NULL");
    check_cuda(cudaEventRecord(reinterpret_cast<cudaEvent_t>(e), cuda_stream(s)), "cudaEventRecord");
  });
}

PL_Error* cuda_event_synchronize(PL_Accelerator* acc, PL_Event* e) {
  return run(acc, [&] {
    if (e == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "cuda: event_synchronize: event is NULL");
    check_cuda(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(e)), "cudaEventSynchronize");
    acc->checks.report("event_synchronize");
  });
}

PL_Error* cuda_stream_wait_event(PL_Accelerator* acc, PL_Stream* s, PL_Event* e) {
  return run(acc, [&] {
    if (e == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "cuda: stream_wait_event: event is NULL");
    check_cuda(cudaStreamWaitEvent(cuda_stream(s), reinterpret_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
  });
}

// ---- the descriptor ----

PL_AcceleratorApi make_api() {
  using namespace plrt::cuda;
  PL_AcceleratorApi api{};
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
  api.fill = cuda_fill;
  api.scale = cuda_scale;
  api.axpy = cuda_axpy;
  api.cast = cuda_cast;
  api.sgd_step = cuda_sgd_step;
  api.adam_step = cuda_adam_step;
  api.quantize_u8 = cuda_quantize_u8;
  api.dequantize_u8 = cuda_dequantize_u8;
  api.gemm = cuda_gemm;
  api.add_bias = cuda_add_bias;
  api.sum_rows = cuda_sum_rows;
  api.relu = cuda_relu;
  api.relu_backward = cuda_relu_backward;
  api.cross_entropy = cuda_cross_entropy;
  api.argmax_rows = cuda_argmax_rows;
  api.unscale_check = cuda_unscale_check;
  api.pack = cuda_pack;  // ABI 1.4
  api.unpack = cuda_unpack;
  api.device_status = cuda_device_status;
  api.sum_squares = cuda_sum_squares;  // ABI 1.5
  api.clamp = cuda_clamp;
  return api;
}

const PL_AcceleratorApi kApi = make_api();

const PL_Alias kAliases[] = {{sizeof(PL_Alias),
                              "gpu",
                              "Lightning's accelerator=\"gpu\": NVIDIA GPUs through CUDA",
                              {sizeof(PL_OptionList), nullptr, 0}}};

const PL_Plugin kPlugin = {
    sizeof(PL_Plugin),
    PL_ABI_MAJOR,
    PL_ABI_MINOR,
    PL_PLUGIN_ACCELERATOR,
    "cuda",
    "0.2.0",
    "NVIDIA GPUs through the CUDA runtime (honours CUDA_VISIBLE_DEVICES): every kernel of the cpu reference on the "
    "GPU (fused SGD/Adam, uint8 quantisation, f16/bf16 layers, gemm on cuBLAS, unscale_check, bucket pack/unpack, "
    "gradient clipping's sum_squares/clamp); "
    "device_status: which GPUs are free (NVML and a context probe in a child process)",
    kAliases,
    1,
    &kApi};

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
