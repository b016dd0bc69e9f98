// A stand-in accelerator for the gloo staging tests on machines without a GPU: a "cuda" device
// (two of them, cuda:0 and cuda:1) whose memory this process cannot touch directly.  It holds the
// plugin to what CUDA demands and more, so that the staging code is exercised, not assumed:
//   - device addresses lie in a PROT_NONE reservation: gloo or the plugin reading or writing a
//     device pointer itself crashes the test instead of passing it;
//   - copies on the default stream are only queued, and happen at stream_synchronize: results
//     read before the plugin synchronises are stale;
//   - a copy must come from a thread bound to the copy's device (set_device), and its host side
//     must lie inside a page-locked block from alloc_host;
//   - alloc_host blocks are counted, so the tests see reuse and that destroy frees them.
// The real CUDA path is tested with the cuda accelerator plugin where there is a GPU.
#pragma once

#include <plrt/pl_accelerator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace emulated {

class Device {
 public:
  static constexpr int kDevices = 2;
  explicit Device(size_t capacity = size_t{1} << 30);  // address space per device, reserved lazily
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // An instance for one rank: errors are made with that rank's host.  Freed with the Device.
  PL_Accelerator* instance(const PL_Host* host);
  static const PL_AcceleratorApi* api();

  // The test's own access to device memory (no API rules): allocate, write, read.
  void* alloc(int index, size_t bytes);
  void write(void* device_ptr, const void* src, size_t bytes);
  void read(void* dst, const void* device_ptr, size_t bytes);

  int64_t pinned_allocations() const { return pinned_allocs_.load(); }
  int64_t pinned_outstanding() const;
  int64_t copies() const { return copies_.load(); }

  // ---- what the API entries do (emulated_device.cpp) ----
  struct Copy {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
  };
  // The backing memory of [p, p + bytes) on device `index`, or nullptr when it is not all there.
  uint8_t* backing(const void* p, size_t bytes, int index) const;
  bool pinned_range(const void* p, size_t bytes) const;
  void* pinned_alloc(size_t bytes);
  bool pinned_free(void* p);
  void enqueue(const Copy& c);
  void synchronize();
  std::atomic<int64_t> copies_{0};

 private:
  size_t capacity_;
  uint8_t* reserved_[kDevices] = {};  // PROT_NONE: the addresses handed out
  uint8_t* store_[kDevices] = {};     // read-write: where the bytes are
  size_t used_[kDevices] = {};
  mutable std::mutex m_;
  std::mutex run_m_;                    // synchronize()
  std::map<uintptr_t, size_t> pinned_;  // start -> size
  std::vector<Copy> queue_;             // the default stream's pending copies
  std::vector<PL_Accelerator*> instances_;
  std::atomic<int64_t> pinned_allocs_{0};
};

}  // namespace emulated
