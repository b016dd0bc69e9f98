// The "cpu" accelerator plugin: the host as one device (Lightning's CPUAccelerator, where
// `devices` counts processes), plain host memory, trivially complete streams and events, and the
// reference kernels of kernels.hpp (gemm on OpenBLAS, whose thread count the "num_threads" option
// sets), with ABI 1.3's float16/bfloat16 layers and unscale_check, ABI 1.4's pack/unpack and ABI
// 1.5's sum_squares/clamp.  The kernel entries are in cpu_kernel_entries.cpp.
//
// Every exported function runs its body inside plrt::plugin::guard(host, ...), so no C++ exception
// crosses the C ABI.  The host table lives in the instance (PL_Accelerator), never in a global.
// A NULL instance (or a NULL host in create) leaves no way to report an error through the host;
// that is a broken caller invariant and aborts with a message on stderr.
#include <plrt/pl_plugin.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "arg_checks.hpp"
#include "cpu_instance.hpp"
#include "cpu_options.hpp"
#include "kernels.hpp"
#include "plugin_support.hpp"

namespace {

using plrt::cpu_plugin::broken_call;
using plrt::cpu_plugin::check_stream;
using plrt::cpu_plugin::run;
using plrt::kernel_args::device_name;
using plrt::plugin::fail;
using plrt::plugin::guard;

constexpr size_t kAlignment = 64;

void require_cpu(PL_Device d, const char* fn, const char* what) {
  if (d.type != PL_DEVICE_CPU)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + what + " " + device_name(d) +
                                      " is not a cpu device; the cpu accelerator handles host memory only");
}

void require_index_0(int32_t index, const char* fn) {
  if (index != 0)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(fn) + ": device index " + std::to_string(index) +
                                      " is invalid; the cpu accelerator has one device, index 0 (the host; "
                                      "its `devices` count processes)");
}

template <class T>
void require_out(T* out, const char* fn) {
  if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, std::string(fn) + ": out is NULL");
}

void check_event(PL_Accelerator* acc, const PL_Event* e, const char* fn) {
  if (e == nullptr) fail(PL_ERR_INVALID_ARGUMENT, std::string(fn) + ": event is NULL");
  if (e->owner != acc)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the event was made by another cpu accelerator instance");
}

// Writes `value` into the caller's struct: as many bytes as both sides know (the caller declares
// its size in out->struct_size); out->struct_size becomes the number of bytes written.
template <class T>
void write_out(T* out, T value, size_t v1_size, const char* fn, const char* type) {
  require_out(out, fn);
  if (out->struct_size < v1_size)
    fail(PL_ERR_VERSION, std::string(fn) + ": " + type + ".struct_size " + std::to_string(out->struct_size) +
                             " is smaller than the v1 size " + std::to_string(v1_size) + "; set it to sizeof(" + type +
                             ")");
  const size_t n = out->struct_size < sizeof(T) ? out->struct_size : sizeof(T);
  value.struct_size = n;
  std::memcpy(static_cast<void*>(out), &value, n);
}

void copy_string(char* dst, size_t cap, const std::string& s) { std::snprintf(dst, cap, "%s", s.c_str()); }

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start == std::string::npos) continue;
    const size_t end = line.find_last_not_of(" \t\r");
    return line.substr(start, end - start + 1);
  }
  return "cpu";
}

// MemTotal / MemAvailable from /proc/meminfo (bytes), else sysconf.
void host_memory(uint64_t* total, uint64_t* available) {
  *total = 0;
  *available = 0;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") *total = kib * 1024;
    if (key == "MemAvailable:") *available = kib * 1024;
  }
  const long page = sysconf(_SC_PAGESIZE);
  if (*total == 0) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    if (pages > 0 && page > 0) *total = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  if (*available == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES);
    if (pages > 0 && page > 0) *available = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
}

void* aligned_allocate(size_t bytes, const char* fn) {
  if (bytes > SIZE_MAX - kAlignment)
    fail(PL_ERR_RESOURCE, std::string(fn) + ": cannot allocate " + std::to_string(bytes) + " bytes");
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr)
    fail(PL_ERR_RESOURCE, std::string(fn) + ": out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

// ---- lifecycle ----

PL_Error* cpu_create(const PL_Host* host, const PL_OptionList* options, PL_Accelerator** out) {
  if (host == nullptr) broken_call("create", "host");
  return guard(host, [&] {
    require_out(out, "create");
    *out = nullptr;
    const int threads = plrt::cpu::blas_threads_for(options);
    if (threads > 0) plrt::cpu::set_blas_threads(threads);
    *out = new PL_Accelerator{host};
    plrt::plugin::logf(host, PL_LOG_DEBUG, "cpu", "cpu accelerator created; gemm uses %d OpenBLAS thread(s)%s",
                       plrt::cpu::blas_threads(), threads > 0 ? "" : " (OpenBLAS's default)");
  });
}

void cpu_destroy(PL_Accelerator* acc) { delete acc; }

// ---- devices ----

PL_Error* cpu_availability(PL_Accelerator* acc, PL_DeviceAvailability* out) {
  return run(acc, "availability", [&] {
    PL_DeviceAvailability a{};
    a.device_count = 1;  // the host; `devices` for cpu is a process count
    write_out(out, a, PL_STRUCT_SIZE(PL_DeviceAvailability, reason), "availability", "PL_DeviceAvailability");
  });
}

PL_Error* cpu_device_info(PL_Accelerator* acc, int32_t index, PL_DeviceInfo* out) {
  return run(acc, "device_info", [&] {
    require_out(out, "device_info");
    require_index_0(index, "device_info");
    PL_DeviceInfo info{};
    copy_string(info.name, sizeof info.name, cpu_model_name());
    host_memory(&info.total_memory, &info.free_memory);
    write_out(out, info, PL_STRUCT_SIZE(PL_DeviceInfo, compute_minor), "device_info", "PL_DeviceInfo");
  });
}

PL_Error* cpu_set_device(PL_Accelerator* acc, int32_t index) {
  return run(acc, "set_device", [&] { require_index_0(index, "set_device"); });
}

// ---- memory ----

PL_Error* cpu_alloc(PL_Accelerator* acc, PL_Device device, size_t bytes, void** out) {
  return run(acc, "alloc", [&] {
    require_out(out, "alloc");
    *out = nullptr;
    require_cpu(device, "alloc", "device");
    *out = aligned_allocate(bytes, "alloc");
  });
}

PL_Error* cpu_free_memory(PL_Accelerator* acc, PL_Device device, void* ptr) {
  return run(acc, "free_memory", [&] {
    require_cpu(device, "free_memory", "device");
    std::free(ptr);
  });
}

PL_Error* cpu_alloc_host(PL_Accelerator* acc, size_t bytes, void** out) {
  return run(acc, "alloc_host", [&] {
    require_out(out, "alloc_host");
    *out = nullptr;
    *out = aligned_allocate(bytes, "alloc_host");
  });
}

PL_Error* cpu_free_host(PL_Accelerator* acc, void* ptr) {
  return run(acc, "free_host", [&] { std::free(ptr); });
}

PL_Error* cpu_copy(PL_Accelerator* acc, void* dst, PL_Device dst_device, const void* src, PL_Device src_device,
                   size_t bytes, PL_Stream* stream) {
  return run(acc, "copy", [&] {
    require_cpu(dst_device, "copy", "dst_device");
    require_cpu(src_device, "copy", "src_device");
    check_stream(acc, stream, "copy");
    if (bytes == 0) return;
    if (dst == nullptr || src == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, std::string("copy: ") + (dst == nullptr ? "dst" : "src") + " is NULL for " +
                                        std::to_string(bytes) + " bytes");
    std::memmove(dst, src, bytes);
  });
}

// ---- streams and events (everything is complete when the call returns) ----

PL_Error* cpu_stream_create(PL_Accelerator* acc, PL_Device device, PL_Stream** out) {
  return run(acc, "stream_create", [&] {
    require_out(out, "stream_create");
    *out = nullptr;
    require_cpu(device, "stream_create", "device");
    *out = new PL_Stream{acc};
  });
}

PL_Error* cpu_stream_destroy(PL_Accelerator* acc, PL_Stream* stream) {
  return run(acc, "stream_destroy", [&] {
    check_stream(acc, stream, "stream_destroy");
    delete stream;  // NULL (the default stream) is a no-op
  });
}

PL_Error* cpu_stream_synchronize(PL_Accelerator* acc, PL_Stream* stream) {
  return run(acc, "stream_synchronize", [&] { check_stream(acc, stream, "stream_synchronize"); });
}

PL_Error* cpu_event_create(PL_Accelerator* acc, PL_Device device, PL_Event** out) {
  return run(acc, "event_create", [&] {
    require_out(out, "event_create");
    *out = nullptr;
    require_cpu(device, "event_create", "device");
    *out = new PL_Event{acc, false};
  });
}

PL_Error* cpu_event_destroy(PL_Accelerator* acc, PL_Event* event) {
  return run(acc, "event_destroy", [&] {
    if (event == nullptr) return;  // like free(NULL)
    check_event(acc, event, "event_destroy");
    delete event;
  });
}

PL_Error* cpu_event_record(PL_Accelerator* acc, PL_Event* event, PL_Stream* stream) {
  return run(acc, "event_record", [&] {
    check_event(acc, event, "event_record");
    check_stream(acc, stream, "event_record");
    event->recorded = true;
  });
}

PL_Error* cpu_event_synchronize(PL_Accelerator* acc, PL_Event* event) {
  return run(acc, "event_synchronize", [&] { check_event(acc, event, "event_synchronize"); });
}

PL_Error* cpu_stream_wait_event(PL_Accelerator* acc, PL_Stream* stream, PL_Event* event) {
  return run(acc, "stream_wait_event", [&] {
    check_stream(acc, stream, "stream_wait_event");
    check_event(acc, event, "stream_wait_event");
  });
}

// ---- the descriptor ----

PL_AcceleratorApi make_api() {
  PL_AcceleratorApi a{};
  a.struct_size = sizeof(PL_AcceleratorApi);
  a.device_type = PL_DEVICE_CPU;
  a.flags = PL_ACCEL_DEVICES_ARE_PROCESSES | PL_ACCEL_SYNCHRONOUS;
  a.create = cpu_create;
  a.destroy = cpu_destroy;
  a.availability = cpu_availability;
  a.device_info = cpu_device_info;
  a.set_device = cpu_set_device;
  a.alloc = cpu_alloc;
  a.free_memory = cpu_free_memory;
  a.alloc_host = cpu_alloc_host;
  a.free_host = cpu_free_host;
  a.copy = cpu_copy;
  a.stream_create = cpu_stream_create;
  a.stream_destroy = cpu_stream_destroy;
  a.stream_synchronize = cpu_stream_synchronize;
  a.event_create = cpu_event_create;
  a.event_destroy = cpu_event_destroy;
  a.event_record = cpu_event_record;
  a.event_synchronize = cpu_event_synchronize;
  a.stream_wait_event = cpu_stream_wait_event;
  plrt::cpu_plugin::set_kernel_entries(a);  // fill .. unpack, sum_squares, clamp
  a.device_status = nullptr;                // the host's "devices" are processes: every one is usable
#ifdef PLRT_CPU_AS_ABI_1_4
  a.struct_size = PL_STRUCT_SIZE(PL_AcceleratorApi, device_status);  // the 1.5 entries are past its end
#endif
  return a;
}

// tests/sdk builds this file a second time with PLRT_CPU_AS_ABI_1_4: "cpu14", an ABI 1.4 plugin
// whose table ends at device_status, for the tests of the host's fallbacks for newer entries.
#ifdef PLRT_CPU_AS_ABI_1_4
constexpr const char* kName = "cpu14";
constexpr int32_t kAbiMinor = 4;
#else
constexpr const char* kName = "cpu";
constexpr int32_t kAbiMinor = PL_ABI_MINOR;
#endif

const PL_AcceleratorApi kApi = make_api();

const PL_Plugin kPlugin = {
    sizeof(PL_Plugin),
    PL_ABI_MAJOR,
    kAbiMinor,
    PL_PLUGIN_ACCELERATOR,
    kName,
    "0.1.0",
    "The host CPU: devices count processes; reference kernels for fill, axpy, cast, SGD, Adam, uint8 "
    "quantisation, dense layers (gemm on OpenBLAS, bias, ReLU, cross-entropy, argmax; f16/bf16 as tensor cores "
    "compute them), the gradient scaler's unscale_check, bucket pack/unpack and gradient clipping's "
    "sum_squares/clamp; option num_threads",
    nullptr,
    0,
    &kApi,
};

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
