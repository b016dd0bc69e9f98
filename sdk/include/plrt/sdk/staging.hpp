// pl::StagingLoader: batches of a DataLoader prepared on a background thread and copied to the
// device ahead of use, so that compute never waits on the host (torch's DataLoader with
// pin_memory plus a CUDA prefetcher).
//
// On an asynchronous accelerator (cuda) the thread builds each host batch, copies it into
// page-locked staging memory and issues the host-to-device copy on a dedicated copy stream,
// recording an event; next() makes the default stream wait on that event (the host does not
// wait).  Device buffers come from a ring of depth + 1 slots and are reused: before a slot is
// overwritten the copy stream waits for an event recorded on the default stream when the consumer
// asked for the following batch, so kernels still reading the old batch finish first.  A batch
// whose tensors the user still holds when asking for the next one is never overwritten: that slot
// gets fresh buffers.  On a synchronous accelerator (cpu), or for a host device, there is nothing
// to stage: the thread only prefetches host batches, `depth` ahead.
//
// An exception on the thread (a bad dataset index, a failed copy) is rethrown by next(), in batch
// order, and again by every later next() until start() or stop().  Do not change the loader
// (set_epoch, set_seed, distribute) while a pass is running; start() after changing it.
#pragma once

#include <cstdint>
#include <memory>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/data.hpp>

namespace pl {

class StagingLoader {
 public:
  // `loader` must outlive this object.  `depth` >= 1 batches are prepared ahead (else pl::Error
  // naming the value); `device` must be a device of `acc` (or the host).
  StagingLoader(DataLoader& loader, Accelerator acc, PL_Device device, int depth = 2);
  ~StagingLoader();  // stop()
  StagingLoader(const StagingLoader&) = delete;
  StagingLoader& operator=(const StagingLoader&) = delete;

  // Begins staging batches [first_batch, num_batches()) of the loader's current epoch (call after
  // loader.set_epoch); a pass already running is stopped first.  first_batch in [0, num_batches()]
  // (else pl::Error naming it); num_batches() makes an empty pass (resume at the end of an epoch).
  void start(int64_t first_batch = 0);
  // The next batch, on the device; false when the pass is over.  Throws what the thread threw,
  // and pl::Error when no pass was started.
  bool next(Batch& out);
  // Stops and joins the thread (it finishes the batch it is building; a producer waiting for room
  // wakes at once), waits for copies in flight, and keeps the buffers for the next start().
  void stop();

  int64_t num_batches() const;  // the loader's batches per epoch
  int depth() const;
  bool staged() const;  // true when batches are copied on a copy stream (an asynchronous device)

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace pl
