// Which elements of a gradient bucket each rank owns (ZeRO's partition), as pure arithmetic that
// the reduce-scatter, the parameter allgather and the optimizer's ranges all share, so they cannot
// disagree.
//
// Shards are ELEMENT ranges, not whole parameters: a bucket of n elements (its members back to back,
// in the reducer's layout) is padded to W * c elements with c = ceil(n / W), and rank r owns flat
// elements [r * c, min((r + 1) * c, n)): chunk r of an equal-count reduce-scatter and allgather (the
// collectives' fast, in-place layout).  A member that straddles a chunk boundary is split between
// ranks.  So every rank owns at most ceil(n / W) elements of each bucket: over B buckets its share
// exceeds total / W by fewer than B elements, whatever the parameters' sizes (fairscale's OSS and
// torch's ZeroRedundancyOptimizer hand out whole parameters and cannot balance one huge layer).
//
// Pure: no ABI calls; the unit tests call it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace plrt::ddp_sharded {

// Part of one bucket member inside a rank's chunk.
struct Piece {
  size_t member = 0;        // position in the bucket's member list
  int64_t param_begin = 0;  // elements [param_begin, param_end) of that member's flat tensor
  int64_t param_end = 0;
  int64_t flat_offset = 0;  // where param_begin lies in the bucket's flat buffer
};

struct BucketShard {
  int64_t chunk = 0;   // c = ceil(n / W): every rank's chunk of the padded buffer
  int64_t padded = 0;  // W * c
  int64_t begin = 0;   // this rank's owned elements of the flat buffer: [begin, end), maybe empty
  int64_t end = 0;
  std::vector<Piece> pieces;  // the members' parts in [begin, end), in flat order
};

// The chunk size of a bucket of `numel` elements over `world` ranks (world >= 1): ceil(numel / world).
int64_t chunk_of(int64_t numel, int world);

// `offsets[j]` and `numels[j]`: member j's place in the flat buffer (back to back, in order), whose
// elements number `numel`.  Throws std::invalid_argument on a world < 1, a rank outside [0, world)
// or members that do not tile [0, numel).
BucketShard shard_bucket(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels, int64_t numel,
                         int world, int rank);

}  // namespace plrt::ddp_sharded
