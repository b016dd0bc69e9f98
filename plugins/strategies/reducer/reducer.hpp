// The gradient-sync core every bucketing strategy shares (PyTorch's Reducer): buckets of trainable
// gradients (bucket_plan.hpp: caps, reverse registration order, one dtype and device each), ready
// tracking as backward reports gradients, a bucket's communication started the moment it is full
// and all earlier buckets have started (strict issue order: the process group numbers collectives
// by issue order and every rank must issue the same sequence), overlap with the rest of backward,
// bounded waits, and abort.  What a bucket's communication IS comes from a BucketComm
// (bucket_comm.hpp): ddp's allreduce of the mean, or several collectives per bucket.
//
// Packing a bucket is one call of the accelerator's batched `pack` (ABI 1.4), unpacking one call of
// `unpack`; an accelerator without them gets one copy per gradient.
//
// Thread safety: on_grad_ready may come from any thread; every public call takes the reducer's
// lock.  The BucketComm's start/next/finish run under it.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "bucket_comm.hpp"
#include "group.hpp"

namespace plrt::reducer {

using Clock = std::chrono::steady_clock;

// Gathers `parts` into `flat` (parts[i] to elements [offsets[i], offsets[i] + parts[i].numel)), or
// scatters them back: one launch of the accelerator's batched pack/unpack (ABI 1.4), else one copy
// per part.  The parts may be sub-ranges of tensors; every one has flat's dtype.  `what` names the
// copy in errors.
// A 1-D view of elements [begin, begin + count) of t's flat memory (same dtype and device).
PL_Tensor sub_view(const PL_Tensor& t, int64_t begin, int64_t count);

void pack_parts(const strategy::DeviceContext& dev, std::vector<PL_Tensor>& parts, const std::vector<int64_t>& offsets,
                PL_Tensor& flat, const std::string& what);
void unpack_parts(const strategy::DeviceContext& dev, const PL_Tensor& flat, const std::vector<int64_t>& offsets,
                  std::vector<PL_Tensor>& parts, const std::string& what);

struct ReducerStats {
  uint64_t steps = 0;           // finish_step calls that completed (synced or not)
  uint64_t early_launches = 0;  // buckets started from on_grad_ready, before finish_step
  double exposed_ms = 0;        // time blocked in finish_step waiting for communication
  double comm_ms = 0;           // per synced step: its first start to its last completion
};

class Reducer {
 public:
  // `who` begins every message; `dev` (the strategy's, outliving the reducer) is where the flat
  // buffers live; `group` (may be empty for one rank) carries the collectives and outlives the
  // reducer; `comm` outlives it too.
  Reducer(std::string who, const strategy::DeviceContext& dev, const strategy::Group& group, BucketComm& comm);
  ~Reducer();  // drains (bounded) whatever is still in flight
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Lays out the buckets of the trainable entries of `params` (borrowed until teardown; names[i]
  // their display names) and allocates their buffers when the group is set.  Caps in bytes.
  void setup(PL_Parameter* params, size_t num_params, const std::vector<std::string>& names, size_t first_cap,
             size_t cap);
  // Parameter i's gradient is final in this step: the bucket starts when full and in order.
  void on_grad_ready(size_t i);
  // The end of backward: starts what is left (in order), drives every bucket's stages to the end,
  // and puts the results into the gradients.  With sync off, only resets the step.  Any failure
  // leaves nothing in flight (the group is aborted when a wait runs out) and the step reset.
  void finish_step();
  void set_grad_sync(bool enabled);
  bool grad_sync() const;
  // Waits (at most wait_ms per bucket) for anything in flight, then forgets the layout.  Returns the
  // first failure's message ("" if none).
  std::string teardown(int64_t wait_ms);

  bool set_up() const;
  bool step_active() const;  // a gradient was reported since the last finish_step
  size_t ready_count() const;
  ReducerStats stats() const;
  size_t num_buckets() const;
  size_t bucket_bytes() const;  // all buckets' bytes together
  size_t buffer_bytes() const;  // the flat buffers' memory (== bucket_bytes unless the comm shares slots)
  // The buckets, for a strategy's work outside the step (after setup, between after_backward and
  // the next run_step: nothing else touches them then).  Their flat buffers are free to use as
  // scratch there.
  std::vector<Bucket>& buckets() { return buckets_; }
  int64_t bucket_of(size_t i) const;

  // For a BucketComm: the group, the device and the names.
  const strategy::Group& group() const { return group_; }
  const strategy::DeviceContext& device() const { return dev_; }
  const std::string& who() const { return who_; }
  // "bucket 2 of 5 (3 parameters, 4096 bytes of float32)"
  std::string describe(const Bucket& b) const;
  // Copies every member's gradient into b.flat / b.flat into every member's gradient.
  void pack(Bucket& b) const;
  void unpack(Bucket& b) const;

 private:
  void require_setup(const char* fn) const;
  void allocate_buffers_locked();
  void start_locked(size_t b, bool early);
  void start_ready_prefix_locked();
  // Waits for b's work and runs its next stages until the comm is done; throws on failure (the
  // work is freed first, the group aborted when it is still running).
  void drive_locked(Bucket& b);
  std::string drain_locked(int64_t wait_ms);
  void reset_step_locked();

  std::string who_;
  const strategy::DeviceContext& dev_;
  const strategy::Group& group_;
  BucketComm& comm_;

  mutable std::mutex m_;
  bool set_up_ = false;
  PL_Parameter* params_ = nullptr;
  size_t num_params_ = 0;
  std::vector<std::string> names_;
  std::vector<Bucket> buckets_;
  std::vector<strategy::DeviceMemory> slots_;  // the shared buffers when comm_.buffer_slots() > 0
  std::vector<int64_t> bucket_of_;             // per parameter: its bucket, -1 when it has none
  bool grad_sync_ = true;
  std::vector<uint8_t> ready_;
  size_t ready_count_ = 0;
  size_t next_start_ = 0;  // buckets [0, next_start_) started in this step
  Clock::time_point first_start_;
  ReducerStats stats_;
};

}  // namespace plrt::reducer
