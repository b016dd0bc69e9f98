// Stage 2's bucket communication: one reduce-scatter of the mean per bucket, in place (rank r's
// chunk of the padded flat buffer receives the average of every rank's chunk r), then only the
// rank's own pieces are unpacked into the gradients; the rest of the gradient memory keeps this
// rank's local values, which the host must not read (pl_strategy.h owned_ranges).  The buckets
// share two flat buffers (buffer_slots), so the strategy's gradient memory is two buckets, not the
// model.  A bucket of one parameter (on a wide model, each large layer) is reduce-scattered in
// place in that parameter's gradient (in_place: its chunks are the inputs, this rank's own chunk the
// output), with no buffer and no copy; its chunks are the same element ranges as the padded layout's.
#pragma once

#include <vector>

#include "bucket_comm.hpp"
#include "shard_plan.hpp"

namespace plrt::ddp_sharded {

class ReduceScatterMean final : public reducer::BucketComm {
 public:
  // The number of shared buffers: one filling while the other is reduced.
  static constexpr size_t kSlots = 2;

  ReduceScatterMean(int rank, int world) : rank_(rank), world_(world) {}
  std::string name() const override { return "reduce-scatter"; }
  size_t buffer_slots() const override { return kSlots; }
  bool in_place(const reducer::Bucket& b) const override {
    (void)b;
    return true;
  }
  int64_t padded_numel(int64_t numel) const override { return chunk_of(numel, world_) * world_; }
  void prepare(reducer::Reducer& r, reducer::Bucket& b) override;
  PL_Work* start(reducer::Reducer& r, reducer::Bucket& b) override;
  void finish(reducer::Reducer& r, reducer::Bucket& b) override;

 private:
  int rank_, world_;
};

// The layout of bucket b on this rank (shard_bucket over the reducer's member layout).
BucketShard shard_of(const reducer::Bucket& b, int world, int rank);

}  // namespace plrt::ddp_sharded
