// setup: ddp's (checks, rank 0's values everywhere, the gradient buckets, the buffer broadcasts),
// then this rank's shard of every bucket (shard_plan.hpp): the ranges it steps and owns, and the
// per-bucket plan of the parameter allgather.
#include <algorithm>

#include "reducer.hpp"
#include "sharded_strategy.hpp"

namespace plrt::ddp_sharded {

namespace {

size_t bytes_of(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

void plan_shards(ShardedStrategy& s) {
  ddp::DdpStrategy& d = *s.core;
  s.owned.clear();
  s.gathers.clear();
  s.owned_bytes = s.trainable_bytes = s.param_bytes = 0;
  for (size_t i = 0; i < d.num_params; ++i) {
    const PL_ParamKind kind = pl_parameter_kind(&d.params[i]);
    if (kind != PL_PARAM_BUFFER) s.param_bytes += bytes_of(d.params[i].value);
    if (kind == PL_PARAM_TRAINABLE) s.trainable_bytes += bytes_of(d.params[i].value);
  }
  const int world = d.group ? s.world : 1;  // one rank: it owns everything
  const int rank = d.group ? s.rank : 0;
  for (reducer::Bucket& b : d.grads->buckets()) {
    const BucketShard shard = shard_of(b, world, rank);
    for (const Piece& p : shard.pieces) {
      const size_t i = b.plan.members[p.member];
      s.owned.push_back({sizeof(PL_ParamRange), i, p.param_begin, p.param_end});
      s.owned_bytes += static_cast<size_t>(p.param_end - p.param_begin) * pl_dtype_size(b.plan.dtype);
    }
    if (!d.group) continue;
    GatherPlan g;
    g.chunk = shard.chunk;
    g.what = s.who + ": the parameter allgather of " + d.grads->describe(b);
    if (b.plan.members.size() == 1) {  // in place in the parameter: chunk q, clipped to its elements
      g.direct = true;
      const PL_Tensor& value = d.params[b.plan.members[0]].value;
      for (int q = 0; q < world; ++q) {
        const int64_t begin = std::min(shard.chunk * q, value.numel);
        g.outputs.push_back(reducer::sub_view(value, begin, std::min(shard.chunk, value.numel - begin)));
      }
      s.gathers.push_back(std::move(g));
      continue;
    }
    for (const Piece& p : shard.pieces) {
      g.own.push_back(
          reducer::sub_view(d.params[b.plan.members[p.member]].value, p.param_begin, p.param_end - p.param_begin));
      g.own_offsets.push_back(p.flat_offset);
    }
    for (size_t j = 0; j < b.plan.members.size(); ++j) g.values.push_back(d.params[b.plan.members[j]].value);
    g.offsets = b.offsets;
    g.what_pack = g.what + ": packing this rank's shard";
    g.what_unpack = g.what + ": unpacking";
    for (int q = 0; q < world; ++q) g.outputs.push_back(reducer::sub_view(b.flat, shard.chunk * q, shard.chunk));
    s.gathers.push_back(std::move(g));
  }
  // A trainable parameter without elements has no bucket; nothing to own.
}

}  // namespace

void setup(ShardedStrategy& s, PL_Parameter* params, size_t num_params) {
  ddp::setup(*s.core, params, num_params);
  try {
    std::lock_guard<std::mutex> lock(s.core->m);
    plan_shards(s);
  } catch (...) {
    ddp::teardown(*s.core);
    throw;
  }
  plugin::logf(s.host, PL_LOG_DEBUG, s.who.c_str(),
               "rank %d owns %zu ranges, %zu of %zu trainable bytes, in %zu buckets (stage %d)", s.rank, s.owned.size(),
               s.owned_bytes, s.trainable_bytes, s.core->grads->num_buckets(), s.opts.stage);
}

void teardown(ShardedStrategy& s) {
  ddp::teardown(*s.core);
  std::lock_guard<std::mutex> lock(s.core->m);
  s.owned.clear();
  s.gathers.clear();
}

}  // namespace plrt::ddp_sharded
