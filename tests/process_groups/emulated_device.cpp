// The emulated device of the gloo staging tests (see emulated_device.hpp).
#include "emulated_device.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

struct PL_Accelerator {
  emulated::Device* dev;
  const PL_Host* host;
};

namespace emulated {

namespace {

thread_local int tl_bound = -1;  // the device set_device bound this thread to; -1: none

PL_Error* err(PL_Accelerator* a, PL_ErrorCode code, const std::string& m) {
  return a->host->error_new(code, ("emulated device: " + m).c_str());
}

std::string name(PL_Device d) {
  return std::string(d.type == PL_DEVICE_CPU    ? "cpu:"
                     : d.type == PL_DEVICE_CUDA ? "cuda:"
                                                : "type?:") +
         std::to_string(d.index);
}

PL_Error* e_create(const PL_Host* host, const PL_OptionList*, PL_Accelerator**) {
  return host->error_new(PL_ERR_UNSUPPORTED, "emulated device: instances come from emulated::Device::instance");
}
void e_destroy(PL_Accelerator*) {}

PL_Error* e_availability(PL_Accelerator*, PL_DeviceAvailability* out) {
  out->device_count = Device::kDevices;
  out->reason[0] = '\0';
  return nullptr;
}

PL_Error* e_device_info(PL_Accelerator* a, int32_t index, PL_DeviceInfo* out) {
  if (index < 0 || index >= Device::kDevices)
    return err(a, PL_ERR_INVALID_ARGUMENT, "no device " + std::to_string(index));
  std::snprintf(out->name, sizeof out->name, "emulated device %d", index);
  return nullptr;
}

PL_Error* e_set_device(PL_Accelerator* a, int32_t index) {
  if (index < 0 || index >= Device::kDevices)
    return err(a, PL_ERR_INVALID_ARGUMENT, "set_device(" + std::to_string(index) + "): valid are 0..1");
  tl_bound = index;
  return nullptr;
}

PL_Error* e_alloc(PL_Accelerator* a, PL_Device d, size_t bytes, void** out) {
  if (d.type != PL_DEVICE_CUDA) return err(a, PL_ERR_INVALID_ARGUMENT, "alloc on " + name(d));
  try {
    *out = a->dev->alloc(d.index, bytes);
  } catch (const std::exception& e) {
    return err(a, PL_ERR_RESOURCE, e.what());
  }
  return nullptr;
}

PL_Error* e_free(PL_Accelerator*, PL_Device, void*) { return nullptr; }  // a bump allocator

PL_Error* e_alloc_host(PL_Accelerator* a, size_t bytes, void** out) {
  *out = a->dev->pinned_alloc(bytes);
  return *out ? nullptr : err(a, PL_ERR_RESOURCE, "alloc_host(" + std::to_string(bytes) + ") failed");
}

PL_Error* e_free_host(PL_Accelerator* a, void* p) {
  if (p == nullptr || a->dev->pinned_free(p)) return nullptr;
  return err(a, PL_ERR_INVALID_ARGUMENT, "free_host of a pointer that alloc_host did not return");
}

PL_Error* e_copy(PL_Accelerator* a, void* dst, PL_Device dd, const void* src, PL_Device sd, size_t bytes,
                 PL_Stream* stream) {
  if (stream != nullptr) return err(a, PL_ERR_UNSUPPORTED, "only the default stream is emulated");
  if (bytes == 0) return nullptr;
  if ((dd.type == PL_DEVICE_CUDA) == (sd.type == PL_DEVICE_CUDA))
    return err(a, PL_ERR_UNSUPPORTED, "copy " + name(sd) + " -> " + name(dd) + ": only host <-> device is emulated");
  const PL_Device dev = dd.type == PL_DEVICE_CUDA ? dd : sd;
  if (dev.index != tl_bound)
    return err(a, PL_ERR_RUNTIME,
               "a copy touching " + name(dev) + " from a thread bound to " +
                   (tl_bound < 0 ? std::string("no device") : "cuda:" + std::to_string(tl_bound)) +
                   " (call set_device first)");
  const void* dev_ptr = dd.type == PL_DEVICE_CUDA ? dst : src;
  const void* host_ptr = dd.type == PL_DEVICE_CUDA ? src : dst;
  uint8_t* b = a->dev->backing(dev_ptr, bytes, dev.index);
  if (b == nullptr)
    return err(a, PL_ERR_INVALID_ARGUMENT, std::to_string(bytes) + " bytes are not memory of " + name(dev));
  if (!a->dev->pinned_range(host_ptr, bytes))
    return err(a, PL_ERR_INVALID_ARGUMENT, "the host side of a copy is not inside a page-locked block from alloc_host");
  if (dd.type == PL_DEVICE_CUDA)
    a->dev->enqueue({b, static_cast<const uint8_t*>(src), bytes});
  else
    a->dev->enqueue({static_cast<uint8_t*>(dst), b, bytes});
  return nullptr;
}

PL_Error* e_stream_synchronize(PL_Accelerator* a, PL_Stream* s) {
  if (s != nullptr) return err(a, PL_ERR_UNSUPPORTED, "only the default stream is emulated");
  a->dev->synchronize();
  return nullptr;
}

PL_AcceleratorApi make_api() {
  PL_AcceleratorApi api{};
  api.struct_size = sizeof api;
  api.device_type = PL_DEVICE_CUDA;
  api.flags = 0;  // asynchronous: copies wait for stream_synchronize
  api.create = e_create;
  api.destroy = e_destroy;
  api.availability = e_availability;
  api.device_info = e_device_info;
  api.set_device = e_set_device;
  api.alloc = e_alloc;
  api.free_memory = e_free;
  api.alloc_host = e_alloc_host;
  api.free_host = e_free_host;
  api.copy = e_copy;
  api.stream_synchronize = e_stream_synchronize;
  return api;
}

void* map(size_t bytes, int prot) {
  void* p = ::mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("emulated device: mmap of " + std::to_string(bytes) + " bytes failed");
  return p;
}

}  // namespace

const PL_AcceleratorApi* Device::api() {
  static const PL_AcceleratorApi a = make_api();
  return &a;
}

Device::Device(size_t capacity) : capacity_(capacity) {
  for (int i = 0; i < kDevices; ++i) {
    reserved_[i] = static_cast<uint8_t*>(map(capacity_, PROT_NONE));
    store_[i] = static_cast<uint8_t*>(map(capacity_, PROT_READ | PROT_WRITE));
  }
}

Device::~Device() {
  for (int i = 0; i < kDevices; ++i) {
    ::munmap(reserved_[i], capacity_);
    ::munmap(store_[i], capacity_);
  }
  for (auto* a : instances_) delete a;
  for (auto& [p, n] : pinned_) std::free(reinterpret_cast<void*>(p));
}

PL_Accelerator* Device::instance(const PL_Host* host) {
  std::lock_guard<std::mutex> g(m_);
  instances_.push_back(new PL_Accelerator{this, host});
  return instances_.back();
}

void* Device::alloc(int index, size_t bytes) {
  std::lock_guard<std::mutex> g(m_);
  if (index < 0 || index >= kDevices) throw std::runtime_error("no device " + std::to_string(index));
  const size_t at = (used_[index] + 255) / 256 * 256;
  if (at + bytes > capacity_) throw std::runtime_error("out of emulated device memory");
  used_[index] = at + std::max<size_t>(bytes, 1);
  return reserved_[index] + at;
}

uint8_t* Device::backing(const void* p, size_t bytes, int index) const {
  std::lock_guard<std::mutex> g(m_);
  if (index < 0 || index >= kDevices) return nullptr;
  const auto* q = static_cast<const uint8_t*>(p);
  if (q < reserved_[index] || q + bytes > reserved_[index] + used_[index]) return nullptr;
  return store_[index] + (q - reserved_[index]);
}

void Device::write(void* device_ptr, const void* src, size_t bytes) {
  for (int i = 0; i < kDevices; ++i)
    if (uint8_t* b = backing(device_ptr, bytes, i)) {
      std::memcpy(b, src, bytes);
      return;
    }
  throw std::runtime_error("emulated device: write outside device memory");
}

void Device::read(void* dst, const void* device_ptr, size_t bytes) {
  for (int i = 0; i < kDevices; ++i)
    if (const uint8_t* b = backing(device_ptr, bytes, i)) {
      std::memcpy(dst, b, bytes);
      return;
    }
  throw std::runtime_error("emulated device: read outside device memory");
}

void* Device::pinned_alloc(size_t bytes) {
  const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, n);
  if (p == nullptr) return nullptr;
  std::memset(p, 0xCD, n);  // stale bytes never look like results
  std::lock_guard<std::mutex> g(m_);
  pinned_[reinterpret_cast<uintptr_t>(p)] = n;
  pinned_allocs_.fetch_add(1);
  return p;
}

bool Device::pinned_free(void* p) {
  std::lock_guard<std::mutex> g(m_);
  auto it = pinned_.find(reinterpret_cast<uintptr_t>(p));
  if (it == pinned_.end()) return false;
  pinned_.erase(it);
  std::free(p);
  return true;
}

bool Device::pinned_range(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> g(m_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = pinned_.upper_bound(a);
  if (it == pinned_.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

int64_t Device::pinned_outstanding() const {
  std::lock_guard<std::mutex> g(m_);
  return static_cast<int64_t>(pinned_.size());
}

void Device::enqueue(const Copy& c) {
  std::lock_guard<std::mutex> g(m_);
  queue_.push_back(c);
}

void Device::synchronize() {
  // Held while copying: a synchronize that finds the queue empty still waits for copies that
  // another thread's synchronize took and is performing (as a stream sync waits for all its work).
  std::lock_guard<std::mutex> run(run_m_);
  std::vector<Copy> q;
  {
    std::lock_guard<std::mutex> g(m_);
    q.swap(queue_);
  }
  for (const Copy& c : q) std::memcpy(c.dst, c.src, c.bytes);
  copies_.fetch_add(static_cast<int64_t>(q.size()));
}

}  // namespace emulated
