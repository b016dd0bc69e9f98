#include "reduce_scatter_comm.hpp"

#include <algorithm>

#include "reducer.hpp"

namespace plrt::ddp_sharded {

using plugin::fail;
using strategy::check;

namespace {

// What a bucket keeps: the W input chunks of its flat buffer and its own pieces' gradient views.
struct ShardState final : reducer::BucketState {
  std::vector<PL_Tensor> inputs;     // chunk q of the flat buffer, q = 0..W-1 (borrowed by the work)
  std::vector<PL_Tensor> own;        // the gradient sub-ranges this rank owns
  std::vector<int64_t> own_offsets;  // where each lies in the flat buffer
};

}  // namespace

BucketShard shard_of(const reducer::Bucket& b, int world, int rank) {
  std::vector<int64_t> numels;
  for (const auto& p : b.parts) numels.push_back(p.numel);
  return shard_bucket(b.offsets, numels, b.numel, world, rank);
}

void ReduceScatterMean::prepare(reducer::Reducer& r, reducer::Bucket& b) {
  (void)r;
  const BucketShard s = shard_of(b, world_, rank_);
  auto st = std::make_unique<ShardState>();
  if (b.in_place) {  // chunk q of the gradient itself, clipped to its elements (the last ones may be short or empty)
    const PL_Tensor& grad = b.parts[0];
    for (int q = 0; q < world_; ++q) {
      const int64_t begin = std::min(s.chunk * q, grad.numel);
      st->inputs.push_back(reducer::sub_view(grad, begin, std::min(s.chunk, grad.numel - begin)));
    }
    b.state = std::move(st);
    return;
  }
  for (int q = 0; q < world_; ++q) st->inputs.push_back(reducer::sub_view(b.flat, s.chunk * q, s.chunk));
  for (const Piece& p : s.pieces) {
    st->own.push_back(reducer::sub_view(b.parts[p.member], p.param_begin, p.param_end - p.param_begin));
    st->own_offsets.push_back(p.flat_offset);
  }
  b.state = std::move(st);
}

PL_Work* ReduceScatterMean::start(reducer::Reducer& r, reducer::Bucket& b) {
  auto& st = static_cast<ShardState&>(*b.state);
  PL_Work* w = nullptr;
  const strategy::Group& g = r.group();
  // In place: the output is this rank's own input chunk (both backends accept it).
  check(r.device().host,
        g.api()->reduce_scatter(g.get(), st.inputs.data(), st.inputs.size(), &st.inputs[static_cast<size_t>(rank_)],
                                PL_REDUCE_AVG, &w),
        r.who() + ": starting the gradient reduce-scatter of " + r.describe(b));
  if (w == nullptr) fail(PL_ERR_INTERNAL, r.who() + ": the process group returned no work handle for " + r.describe(b));
  return w;
}

void ReduceScatterMean::finish(reducer::Reducer& r, reducer::Bucket& b) {
  if (b.in_place) return;  // the mean is in this rank's chunk of the gradient already
  auto& st = static_cast<ShardState&>(*b.state);
  reducer::unpack_parts(r.device(), b.flat, st.own_offsets, st.own,
                        r.who() + ": unpacking this rank's shard of " + r.describe(b));
}

}  // namespace plrt::ddp_sharded
