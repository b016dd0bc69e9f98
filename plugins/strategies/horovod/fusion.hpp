// Horovod's tensor fusion, with Horovod's negotiation: gradients that are ready on EVERY rank are
// packed, in one order every rank computes, into a fusion buffer per dtype, which is allreduced as
// one collective once it holds fusion_threshold bytes or once a cycle (cycle_time_ms) has passed
// since its first gradient entered it; what is left goes at the end of backward.
//
// WHY A NEGOTIATION.  Backward can report gradients in another order, and at other times, on each
// rank, while every rank must issue the same collectives with the same contents in the same order.
// ddp avoids the question with a fixed bucket layout; fusion by time cannot (what "1 ms after the
// first gradient" holds differs per rank).  So, as Horovod's controller does, one background
// thread per rank runs CYCLES: each cycle is one small allreduce (MIN) of this rank's ready flags
// (one int32 per trainable parameter, and one "backward is over" flag) on a CONTROL group of its
// own, so the verdict is the same on every rank; the gradients it newly finds ready everywhere
// enter the fusion buffers, in reverse registration order.  A step's first cycle comes
// cycle_time_ms after its first gradient, or at the end of backward if that is sooner.  The cycles are collectives, so
// the ranks' threads run them in lockstep; a rank that is late only makes the others' next cycle wait (in the thread,
// never in backward).
//
// THE RULE, decided from the verdicts alone (so identically on every rank).  At cycle c:
//   1. every fusion buffer that already held gradients before cycle c is allreduced (its first
//      gradient entered at least one cycle, cycle_time_ms, ago), unless c is the last cycle (3);
//   2. the newly ready gradients enter their dtype's buffer in order; a buffer that would pass the
//      threshold is allreduced first, one that reaches it is allreduced at once; a gradient of
//      threshold bytes or more (or every gradient, with threshold 0) is allreduced alone, in place;
//   3. when every rank's backward is over (the thread does not wait out the cycle for that one),
//      the last gradients join the buffers as in 2, every buffer is allreduced and the cycles end.
// The fused collectives go on the DATA group (the strategy's), asynchronously, at most two fusion
// buffers per dtype in flight; a finished one is unpacked into the gradients by the thread.
// after_backward waits (bounded) for the step's last result.
//
// COST.  One allreduce of 4 * (parameters + 1) bytes per cycle on the control group (gloo in host
// memory, whatever the data backend: Horovod's controller), and the cycle's wait: a step's cycles
// are about backward's length / cycle_time_ms, and one for a backward shorter than a cycle.  The control group is one
// more set of connections.
//
// Errors: a failure in the thread (a collective's error or timeout) aborts both groups, so that the
// other ranks fail at once instead of waiting out their timeout, and every later call fails with it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_memory.hpp"
#include "group.hpp"

namespace plrt::horovod {

struct FusionConfig {
  std::string who;         // begins every message
  size_t threshold = 0;    // fusion buffer bytes; 0: every gradient alone
  double cycle_ms = 1.0;   // a cycle's length
  bool average = true;     // the mean (else the sum)
  double predivide = 1.0;  // average: x / f before the sum, * f / n after
  int32_t world = 1;
};

struct FusionStats {
  uint64_t synced_steps = 0;  // after_backward calls with grad sync on
  uint64_t cycles = 0;        // negotiation rounds
  uint64_t allreduces = 0;    // gradient collectives issued (fused buffers and lone gradients)
  uint64_t tensors = 0;       // gradients those carried
  uint64_t bytes = 0;         // their bytes
  double exposed_ms = 0;      // after_backward's wait for the results
};

class Fusion {
 public:
  // `dev`, `data` and `control` are borrowed and outlive the engine (the strategy's).
  Fusion(FusionConfig cfg, const strategy::DeviceContext& dev, const strategy::Group& data,
         const strategy::Group& control);
  ~Fusion();  // teardown()
  Fusion(const Fusion&) = delete;
  Fusion& operator=(const Fusion&) = delete;

  // The trainable entries of `params` (borrowed until teardown), names[i] their display names.
  // Starts the thread when there are several ranks.
  void setup(PL_Parameter* params, size_t num_params, const std::vector<std::string>& names);
  void on_grad_ready(size_t index);
  // The end of backward: every gradient counts as ready; waits for the step's results (sync on).
  void finish_step();
  void set_grad_sync(bool enabled);
  bool grad_sync() const;
  bool step_active() const;  // a gradient was reported since the last finish_step
  // Stops the thread: waits (bounded by wait_ms) for a step in flight, else aborts the groups.
  // Returns the thread's failure ("" if none).
  std::string teardown(int64_t wait_ms);
  FusionStats stats() const;

 private:
  struct Entry {
    size_t param;  // index in setup's array
    PL_Tensor grad;
    size_t bytes;
  };
  struct Open {  // a dtype's fusion buffer being filled
    PL_DType dtype = PL_DTYPE_INVALID;
    std::vector<size_t> members;  // entries (indices into entries_)
    size_t bytes = 0;
    size_t slot_bytes = 0;                      // a buffer's size: the threshold, or all it may hold
    std::vector<strategy::DeviceMemory> slots;  // its buffers (at most kSlots), made at first use
    std::vector<uint8_t> busy;
  };
  struct Flight {  // a collective in flight
    PL_Work* work = nullptr;
    int open = -1;  // the Open whose slot it uses, -1: a lone gradient in place
    int slot = -1;
    std::vector<size_t> members;
    PL_Tensor flat{};
  };

  void loop();
  void cycles();                        // one step's negotiation rounds (the thread)
  void flush(Open& o, int open_index);  // allreduces o's members
  void lone(size_t e);                  // allreduces entry e alone, in place
  PL_Work* issue(PL_Tensor& t, const std::string& what);
  void complete(Flight& f);  // waits, post-scales, unpacks, frees the slot
  void reap(bool all);       // completes the finished flights (all: every one, in order)
  std::string describe(const std::vector<size_t>& members) const;
  // members' gradients, end to end in a flat buffer: their descriptors and element offsets; returns
  // the elements in all.
  int64_t lay_out(const std::vector<size_t>& members, std::vector<PL_Tensor>& parts,
                  std::vector<int64_t>& offsets) const;

  FusionConfig cfg_;
  const strategy::DeviceContext& dev_;
  const strategy::Group& data_;
  const strategy::Group& control_;

  // Set at setup, read-only while the thread runs.
  std::vector<Entry> entries_;      // trainable entries in reverse registration order
  std::vector<std::string> names_;  // per parameter, for messages
  std::vector<int64_t> entry_of_;   // per parameter: its entry, -1 when it has none
  std::vector<Open> opens_;         // one per dtype
  std::vector<int> open_of_;        // per entry: its Open
  std::vector<int32_t> flags_;      // the control allreduce's buffer (the thread's)
  std::vector<uint8_t> agreed_;     // per entry: found ready everywhere in this step (the thread's)
  std::deque<Flight> flights_;      // the thread's

  mutable std::mutex m_;
  std::condition_variable cv_;       // the thread waits for a step, a cycle's end or stop
  std::condition_variable done_cv_;  // after_backward waits for the step's end
  std::vector<uint8_t> ready_;       // per entry: reported in this step
  size_t ready_count_ = 0;
  bool backward_over_ = false;
  bool step_started_ = false, step_done_ = false;
  bool grad_sync_ = true;
  bool stop_ = false;
  std::string error_;
  FusionStats stats_;
  std::thread thread_;
};

}  // namespace plrt::horovod
