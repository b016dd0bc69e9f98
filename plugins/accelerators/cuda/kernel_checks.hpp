// KernelChecks: errors that only the data shows (a label outside [0, c), a non-finite value to
// quantise, a chunk's invalid min/max), found on the GPU and reported through the C ABI.
//
// A checking launch takes a ticket: a device slot its threads atomicMin an error key into, and a
// mapped pinned host record that the kernel's last block fills (check_epilogue.cuh).  Then
// defer() records an event and keeps the ticket, so the launch stays asynchronous (cross_entropy:
// a training step does not wait for its loss; quantize_u8, dequantize_u8: they sit on the
// communication path).  A deferred error is reported by the
//    next synchronisation through this instance (stream_synchronize, event_synchronize, a copy on
//    the default stream), whichever stream it is for, once the launch has completed: the CUDA
//    model of errors that surface at the next synchronising call.
// Slots and records are pooled per device and reused; nothing is allocated per launch.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "check_types.hpp"
#include "cuda_common.hpp"

namespace plrt::cuda {

class KernelChecks {
 public:
  // The message for a found error (record.key != kNoError), after the entry's name and ": ".
  using Describe = std::function<std::string(const CheckRecord& record)>;

  struct Ticket {
    int device = -1;
    int index = -1;                       // in the device's pool
    CheckRef ref;                         // what the kernel gets
    const CheckRecord* record = nullptr;  // the host's view of ref.record
  };

  explicit KernelChecks(const PL_Host* host) : host_(host) {}
  ~KernelChecks();  // waits for deferred checks, logs any error never reported, frees the pools
  KernelChecks(const KernelChecks&) = delete;
  KernelChecks& operator=(const KernelChecks&) = delete;

  // A ticket on `device`, the current device, for a launch on `stream` (a new pool block is
  // initialised on that stream, which is then synchronised once).
  Ticket acquire(int device, cudaStream_t stream);
  // Gives the ticket back: the launch failed before any kernel ran, or its result was read.
  void release(const Ticket& t);
  // Keeps the ticket until the launch, enqueued on `stream`, completes (see report()).
  void defer(const Ticket& t, cudaStream_t stream, const char* op, Describe describe);
  // Releases every deferred ticket whose launch has completed; throws the first error among them
  // (PL_ERR_INVALID_ARGUMENT, naming the entry that found it and `where` it is reported).
  void report(const char* where);

 private:
  struct Block {
    CheckSlot* slots = nullptr;          // device
    CheckRecord* records = nullptr;      // pinned host
    CheckRecord* records_dev = nullptr;  // the same records, as the device addresses them
  };
  struct Pool {
    std::vector<Block> blocks;
    std::vector<int> free;
    std::vector<cudaEvent_t> events;  // spare, for defer()
  };
  struct Pending {
    Ticket ticket;
    cudaEvent_t done;
    std::string op;
    Describe describe;
  };

  void grow(Pool& pool, cudaStream_t stream);  // one more block of slots; the device is current
  void release_locked(const Ticket& t);
  // Harvests the completed deferred tickets (all of them when `wait_all`): their messages, in
  // launch order.  Called with mu_ held.
  std::vector<std::string> harvest_locked(bool wait_all);

  const PL_Host* host_;
  std::mutex mu_;
  std::map<int, Pool> pools_;  // by device
  std::deque<Pending> pending_;
};

}  // namespace plrt::cuda
