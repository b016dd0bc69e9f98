// The memory a kernel's data-dependent check (a bad label, a non-finite value to quantise) reports
// into; shared by the kernels (.cu) and KernelChecks (kernel_checks.cpp).  Plain structs of
// integers so that both compilers lay them out alike.
#pragma once

namespace plrt::cuda {

// "No error": every key a kernel writes is smaller (keys order errors: the smallest is reported).
constexpr unsigned long long kNoError = ~0ull;

// Device memory, one per in-flight check, zero-initialised (cudaMemsetAsync).  Kernels keep the
// smallest error key as its complement in `inv_key` (atomicMax of ~key, so that zero means "no
// error"); the last block to finish (check_epilogue.cuh) moves the key to the host record, leaves
// it in `verdict` for a later kernel of the same call, and zeroes `inv_key` and `blocks_done` for
// the slot's next user.
struct CheckSlot {
  unsigned long long inv_key;
  unsigned long long verdict;
  unsigned int blocks_done;
  unsigned int pad0;
  unsigned long long pad1;
};

// Mapped pinned host memory, written by the last block: the key and what the message needs
// (the bad value, a chunk's min and max), as raw bits.  Read once the launch has completed.
struct CheckRecord {
  unsigned long long key;
  unsigned long long p0;
  unsigned long long p1;
  unsigned long long pad;
};

}  // namespace plrt::cuda
