// The end of a kernel that checks its data (kernel_checks.hpp): threads that find an error report
// its key into the slot (the smallest wins); finish_check, called by every thread of every block
// as the kernel's last statement, lets the last block to finish move the smallest key and its
// payload to the host record.  This is the "last block" pattern of CUDA's threadFenceReduction
// sample: each block fences its writes before it counts itself done, so the last one sees every
// other block's key and outputs.
#pragma once

#include "check_types.hpp"

namespace plrt::cuda::dev {

__device__ __forceinline__ void report_error(CheckSlot* slot, unsigned long long key) {
  atomicMax(&slot->inv_key, ~key);  // the smallest key has the largest complement
}

// payload(key, &p0, &p1) fills what the host message needs for a found key (reads of inputs and
// of outputs other blocks wrote must bypass L1: __ldcg).  Every thread of the block must call this.
template <class Payload>
__device__ void finish_check(CheckSlot* slot, CheckRecord* record, const Payload& payload) {
  __threadfence();  // this thread's outputs and atomics, device-wide, before the block counts itself
  __syncthreads();
  if (threadIdx.x != 0) return;
  const unsigned int ticket = atomicAdd(&slot->blocks_done, 1u);
  if (ticket != gridDim.x - 1) return;
  __threadfence();  // the last block: every other block's writes are visible from here on
  const unsigned long long key = ~atomicExch(&slot->inv_key, 0ull);  // ~0 == kNoError
  unsigned long long p0 = 0, p1 = 0;
  if (key != kNoError) payload(key, &p0, &p1);
  volatile CheckRecord* r = record;
  r->p0 = p0;
  r->p1 = p1;
  r->key = key;
  volatile CheckSlot* s = slot;
  s->verdict = key;
  atomicExch(&slot->blocks_done, 0u);  // the slot is ready for its next kernel
}

}  // namespace plrt::cuda::dev
