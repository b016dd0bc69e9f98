// The pluggable part of the reducer: what one bucket's communication is (PyTorch's DDP
// communication hook, with several collectives per bucket allowed).  The reducer packs a bucket's
// gradients into its flat buffer, calls start(), and from then on drives the bucket's stages: each
// time the work a stage returned completes, it calls next(), until next() returns NULL; then
// finish() leaves the result in the gradients (by default: unpack the whole flat buffer).
//
// ORDER.  Every rank must issue the same collectives in the same order.  The reducer guarantees
// it as long as a BucketComm issues collectives only from start() and next() (never from another
// thread): start() runs for bucket 0, 1, 2, ... strictly in index order (as buckets fill during
// backward), and next() runs in after_backward, bucket by bucket in index order, each bucket to its
// last stage before the next bucket's second stage.  So ddp's sequence is
//   start(0) start(1) ... start(n-1) | next(0) ... | next(1) ... | ...
// on every rank, whatever order its gradients became ready in.
//
// A stage may also do local work before issuing (quantize, reduce a received chunk): the flat
// buffer and any scratch the comm prepared per bucket are its to use until finish().
//
// GROUPS.  A comm issues on the reducer's group unless it was made to run on another (bagua's
// hierarchical communication runs an algorithm among the nodes' leaders, and its own stages on the
// node's group); work_group() names the group whose work is in flight, which the reducer waits on
// and aborts when the wait runs out.  Every group must use the reducer's backend.
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bucket_plan.hpp"
#include "device_memory.hpp"
#include "group.hpp"

namespace plrt::reducer {

class Reducer;

// Whatever per-bucket state a BucketComm keeps (scratch buffers, the stage it is at).
struct BucketState {
  virtual ~BucketState() = default;
};

// One gradient bucket: its members, its flat buffer on the strategy's device, and where each member
// lies in it.  Owned by the reducer; a BucketComm reads and writes `flat` and `state`.
struct Bucket {
  size_t index = 0;
  PlannedBucket plan;
  strategy::DeviceMemory buffer;       // empty when the job has one rank (nothing to communicate)
  PL_Tensor flat{};                    // a 1-D view of `buffer`; borrowed by collectives until their work completes
  std::vector<int64_t> offsets;        // element offset of each member (plan.members[j]) in `flat`
  std::vector<PL_Tensor> parts;        // each member's gradient descriptor, for pack/unpack (set up once)
  std::string what;                    // "<who>: the gradient <comm> of bucket 2 of 5 (...)", for errors
  std::unique_ptr<BucketState> state;  // the BucketComm's, made by prepare()
  int64_t numel = 0;                   // the members' elements; flat.numel may be larger (padding)
  // BucketComm::in_place said yes (a bucket of one parameter): no flat buffer (flat stays empty),
  // nothing packed; the comm works in the member's gradient itself and leaves the result there.
  bool in_place = false;
  // With shared buffers: the bucket that used this bucket's buffer before it in a step (its
  // communication is finished before this one packs), or -1.
  int64_t slot_prev = -1;

  // The step in progress (the reducer's, under its lock).
  size_t pending = 0;       // members whose gradient is not ready yet
  PL_Work* work = nullptr;  // the collective in flight, owned by the reducer until it completes
  int stage = 0;            // collectives issued for this bucket in this step
  bool done = false;        // its communication finished in this step (finish() ran)
};

class BucketComm {
 public:
  // `on`: the group its collectives run on (borrowed: outlives the comm), or NULL for the
  // reducer's.
  explicit BucketComm(const strategy::Group* on = nullptr) : on_(on) {}
  virtual ~BucketComm() = default;
  // What it does, for messages: "the gradient <name> of bucket 2 of 5 (...) failed".
  virtual std::string name() const = 0;
  // MEMORY.  0 (the default): every bucket has a flat buffer of its own for the whole run (ddp: the
  // buffers are its gradient memory).  K > 0: K buffers shared round-robin by the buckets that are
  // not in_place (the i-th of them uses buffer i % K, as large as the largest bucket using it);
  // before a bucket is packed, the bucket that used its buffer before it (Bucket::slot_prev) is
  // completed and finished, so at most K of them are in flight and the memory is K buckets whatever
  // the model's size (ddp_sharded's stage 2).
  virtual size_t buffer_slots() const { return 0; }
  // Asked once per bucket OF ONE PARAMETER at setup, before any buffer exists: true when the comm
  // works in that parameter's gradient itself (a reduce-scatter in place over its chunks), so the
  // bucket needs no flat buffer and no copy: then prepare() sees b.in_place, start() gets the
  // gradient unpacked, and finish() (not the default unpack) leaves the result.  Shared buffers
  // (buffer_slots) go round the other buckets only.  Default: false.
  virtual bool in_place(const Bucket& b) const {
    (void)b;
    return false;
  }
  // The flat buffer's element count for a bucket of `numel` elements (a reduce-scatter pads to a
  // multiple of the world size); the padding is zeroed once and never unpacked.
  virtual int64_t padded_numel(int64_t numel) const { return numel; }
  // Once per bucket at setup, after its buffer exists: make the bucket's scratch (b.state).
  virtual void prepare(Reducer& r, Bucket& b) {
    (void)r;
    (void)b;
  }
  // b.flat holds this rank's packed gradients: start the first collective and return its work
  // (owned by the reducer from then on), or NULL when nothing needs to be communicated.
  virtual PL_Work* start(Reducer& r, Bucket& b) = 0;
  // The work of b.stage completed: issue the next collective and return its work, or return NULL
  // when the bucket's communication is over.
  virtual PL_Work* next(Reducer& r, Bucket& b) {
    (void)r;
    (void)b;
    return nullptr;
  }
  // The communication is over: put the result into the gradients.  The default unpacks the whole
  // flat buffer into every member's gradient (an in_place bucket: nothing to do).
  virtual void finish(Reducer& r, Bucket& b);
  // The group whose work b.work is (asked while it is in flight).  Default: group(r).
  virtual const strategy::Group& work_group(const Reducer& r, const Bucket& b) const;

 protected:
  // The group the collectives run on: the one given at construction, else the reducer's.
  const strategy::Group& group(const Reducer& r) const;

 private:
  const strategy::Group* on_;
};

// One allreduce per bucket: ddp's with PL_REDUCE_AVG (the gradients' mean over the ranks), bagua's
// gradient_allreduce with PL_REDUCE_AVG or, with average=false, PL_REDUCE_SUM.
class Allreduce final : public BucketComm {
 public:
  explicit Allreduce(PL_ReduceOp op = PL_REDUCE_AVG, const strategy::Group* on = nullptr) : BucketComm(on), op_(op) {}
  std::string name() const override { return "allreduce"; }
  PL_Work* start(Reducer& r, Bucket& b) override;

 private:
  PL_ReduceOp op_;
};

}  // namespace plrt::reducer
