// What the algorithms that exchange weights (decentralized, low_precision_decentralized; docs/bagua.md
// §3, §4) share: the trainable parameters' VALUES laid out in flat buckets, the point-to-point
// transfers of one exchange, and the per-rank restore of the values from a checkpoint.
//
//   ValueBucket / plan_value_buckets  the trainable values in buckets of bucket_size_mb, in reverse
//                                     registration order (bucket_plan.hpp, as the reducer lays out
//                                     the gradients), packed and unpacked with the accelerator's
//                                     batched copies (reducer::pack_parts / unpack_parts);
//   Transfers                         sends and recvs posted on one group (the core's, or the
//                                     nodes' leaders') and waited for together, each bounded by
//                                     the group's timeout;
//   PendingValues                     this rank's own values read by load_state, put back into the
//                                     parameters at the next run_step (the host loads rank 0's
//                                     model into every rank AFTER the strategy's load_state).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rank_state.hpp"
#include "strategy.hpp"  // ddp's core (../ddp)

namespace plrt::bagua {

// One bucket of trainable values (one dtype).
struct ValueBucket {
  size_t index = 0;
  reducer::PlannedBucket plan;
  int64_t numel = 0;
  std::vector<int64_t> offsets;  // element offset of each member (plan.members[j]) in the flat buffer
  std::vector<PL_Tensor> parts;  // each member's value descriptor (borrowed from setup's array)
  std::string name;              // "weight bucket 1 of 2 (2 parameters, 72 bytes of float32)"

  // A 1-D view of numel elements of plan.dtype at `data` on the core's device.
  PL_Tensor view(const ddp::DdpStrategy& c, void* data) const;
};

// The trainable parameters with elements, in buckets of at most bucket_size_mb MiB (a parameter
// larger than that gets a bucket of its own).  Call after ddp's setup.
std::vector<ValueBucket> plan_value_buckets(const ddp::DdpStrategy& c, double bucket_size_mb);

// The members' values into `flat` (b.numel elements of b.plan.dtype), or back.
void pack_values(const ddp::DdpStrategy& c, ValueBucket& b, PL_Tensor& flat);
void unpack_values(const ddp::DdpStrategy& c, ValueBucket& b, const PL_Tensor& flat);

// The point-to-point transfers of one exchange on group `g` (ranks are g's).  Posted asynchronously, in the
// order the caller gives; a backend that runs them one at a time (nccl) needs an order in which
// every blocking send meets its recv, which the callers give (see decentralized.cpp,
// low_precision_decentralized.cpp).  Tensors are borrowed until wait_all returns.
class Transfers {
 public:
  Transfers(const ddp::DdpStrategy& c, const strategy::Group& g, std::string what)
      : c_(c), g_(g), what_(std::move(what)) {}
  ~Transfers();  // a failure path: aborts the group, so that nothing stays in flight, and frees
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  void send(const PL_Tensor& t, int32_t peer, int32_t tag);
  void recv(PL_Tensor& t, int32_t peer, int32_t tag);
  // Waits for every transfer, each at most the group's timeout; the first failure throws (the
  // group aborted when the transfer was still running, the rest freed).
  void wait_all();

 private:
  const ddp::DdpStrategy& c_;
  const strategy::Group& g_;
  std::string what_;
  std::vector<std::pair<PL_Work*, std::string>> works_;  // with what each is, for errors
};

// The trainable values of this rank, as save_state writes them ("x/<index>/<name>" entries) and
// load_state reads them back; put into the parameters at the next run_step.
class PendingValues {
 public:
  // Every trainable parameter's value as a state entry (what load read, while it is pending).
  void save(const ddp::DdpStrategy& c, RankState& out) const;
  // Reads (and checks) every trainable parameter's entry of `in`; throws naming `file`.
  void load(const ddp::DdpStrategy& c, const RankState& in, const std::string& file);
  // Writes what load read into the parameters (once); a no-op when nothing is pending.
  void apply(const ddp::DdpStrategy& c);
  bool pending() const { return !values_.empty(); }

 private:
  std::map<size_t, std::vector<uint8_t>> values_;  // parameter index -> its bytes
};

// save_state and load_state need the parameters: PL_ERR_INVALID_ARGUMENT before setup.
void require_setup(const ddp::DdpStrategy& c, const char* fn);

// Milliseconds since `t0`.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace plrt::bagua
