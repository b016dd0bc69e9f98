// Device buffers through host memory: how a gloo group made for a device (e.g. cuda:0) runs its
// host algorithms on that device's tensors.  Gloo's tcp transport reads and writes host memory
// only, and this plugin links no CUDA: it reaches device memory through the accelerator table the
// config hands it (alloc_host, free_host, copy, stream_synchronize, set_device).
//
// Per op: the device tensors it reads are copied into a page-locked host block (one block per op,
// from a pool: reused across calls, grown as needed, freed when the group is destroyed), the op's
// existing host algorithm runs on host views of them, and the tensors it writes are copied back.
// Copies go on the device's default stream and are synchronised before the op completes, so a
// caller sees finished results when a blocking call returns or its work handle completes; device
// work queued on the default stream before the call is finished before the copy in reads it.
// The thread that stages (the caller's for a blocking call, else the group's worker or a send/
// recv finisher) is bound to the group's device first (set_device), as the copies need.
//
// The host block mirrors the device layout: tensors whose device ranges overlap or touch share one
// contiguous host range at the same relative offsets (and the same address modulo 64), so views of
// one buffer stay views of one buffer, an in-place allgather or reduce_scatter stays in place, and
// an output that aliases an input still does on the host.
//
// A group made for a device also takes CPU tensors (not staged), in any mix within one call; a
// tensor on any other device is refused by name.  A group made for the cpu takes CPU tensors only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plugin_support.hpp"

namespace plrt::gloo_pg {

// "cpu", "cuda", "device type 7".
std::string device_type_text(PL_DeviceType t);
// "cpu:0", "cuda:1", "device type 7:0".
std::string device_text(PL_Device d);

// Page-locked host blocks from the accelerator, kept for reuse.  Thread-safe: collectives take one
// block at a time, send/recv hold theirs until their transfers complete.
class PinnedPool {
 public:
  struct Block {
    uint8_t* ptr = nullptr;
    size_t capacity = 0;
  };
  PinnedPool(const PL_Host* host, const PL_AcceleratorApi* api, PL_Accelerator* acc, std::string device)
      : host_(host), api_(api), acc_(acc), device_(std::move(device)) {}
  ~PinnedPool() { free_all(); }
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // An idle block of at least `bytes` (the smallest that fits), else a new one; an idle block too
  // small for it is freed, so the pool grows to the largest op rather than piling up blocks.
  Block acquire(size_t bytes);
  void release(Block b) noexcept;
  // Frees the idle blocks; blocks released later are freed at once.  Idempotent.
  void free_all() noexcept;

  size_t blocks_allocated() const;  // for logs: how many alloc_host calls so far

 private:
  void free_block(const Block& b) noexcept;

  const PL_Host* host_;
  const PL_AcceleratorApi* api_;
  PL_Accelerator* acc_;
  std::string device_;
  mutable std::mutex m_;
  std::vector<Block> idle_;
  bool closed_ = false;
  size_t allocated_ = 0;
};

// A gloo group's device side: which device it stages, through which accelerator.
class Staging {
 public:
  // nullptr for a group made for the cpu.  Otherwise checks the config's device and accelerator
  // (throws plugin::Failure naming what is missing) without allocating anything.
  static std::shared_ptr<Staging> create(const PL_Host* host, const PL_ProcessGroupConfig& config);

  Staging(const PL_Host* host, const PL_AcceleratorApi* api, PL_Accelerator* acc, PL_Device device);

  const PL_Device& device() const { return device_; }
  const std::string& device_name() const { return name_; }
  bool accepts(const PL_Device& d) const { return d.type == device_.type && d.index == device_.index; }

  // The accelerator's calls, with its errors thrown as plugin::Failure naming the step.
  void bind_thread() const;  // set_device(device)
  void copy(void* dst, PL_Device dst_dev, const void* src, PL_Device src_dev, size_t bytes) const;
  void synchronize() const;  // the default stream; nothing for a synchronous accelerator

  PinnedPool& pool() { return pool_; }

 private:
  void check(PL_Error* e, const std::string& what) const;

  const PL_Host* host_;
  const PL_AcceleratorApi* api_;
  PL_Accelerator* acc_;
  PL_Device device_;
  std::string name_;
  bool synchronous_;
  PinnedPool pool_;
};

// One op's staging.  Register the op's own copies of its tensor descriptors with add(); stage_in()
// copies what the op reads to the host and points every device descriptor at its host view (CPU
// descriptors are left alone); stage_out() copies what it writes back.  The host block is held
// until the object is destroyed.  With no device tensor registered, nothing is allocated or copied.
class StagedOp {
 public:
  enum Role : uint8_t {
    kRead = 1,
    kWrite = 2,
    kReadWrite = 3
  };

  explicit StagedOp(std::shared_ptr<Staging> staging) : staging_(std::move(staging)) {}
  ~StagedOp();
  StagedOp(const StagedOp&) = delete;
  StagedOp& operator=(const StagedOp&) = delete;

  // `t` must stay at its address until stage_out(); it is rewritten by stage_in().
  void add(PL_Tensor* t, Role role);
  void stage_in();
  void stage_out();

 private:
  struct Entry {
    PL_Tensor* t;
    uintptr_t begin, end;  // device bytes
    Role role;
  };
  struct Range {  // a run of device bytes and where it lies in the host block
    uintptr_t begin, end;
    size_t host_offset;
  };
  uint8_t* host_of(uintptr_t device_address) const;

  std::shared_ptr<Staging> staging_;
  std::vector<Entry> entries_;
  std::vector<Range> ranges_;                            // sorted, disjoint, not touching
  std::vector<std::pair<uintptr_t, uintptr_t>> writes_;  // merged device ranges to copy back
  PinnedPool::Block block_;
};

}  // namespace plrt::gloo_pg
