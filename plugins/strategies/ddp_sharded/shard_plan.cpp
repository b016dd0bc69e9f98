#include "shard_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace plrt::ddp_sharded {

int64_t chunk_of(int64_t numel, int world) {
  if (world < 1) throw std::invalid_argument("world " + std::to_string(world) + " must be >= 1");
  return (numel + world - 1) / world;
}

BucketShard shard_bucket(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels, int64_t numel,
                         int world, int rank) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("rank " + std::to_string(rank) + " is not in [0, world " + std::to_string(world) + ")");
  if (offsets.size() != numels.size())
    throw std::invalid_argument("offsets and numels differ in length (" + std::to_string(offsets.size()) + " vs " +
                                std::to_string(numels.size()) + ")");
  int64_t at = 0;
  for (size_t j = 0; j < offsets.size(); ++j) {
    if (offsets[j] != at || numels[j] < 0)
      throw std::invalid_argument("member " + std::to_string(j) + " lies at " + std::to_string(offsets[j]) + " with " +
                                  std::to_string(numels[j]) +
                                  " elements; members must lie back to back "
                                  "from 0 (expected offset " +
                                  std::to_string(at) + ")");
    at += numels[j];
  }
  if (at != numel)
    throw std::invalid_argument("the members hold " + std::to_string(at) + " elements but the bucket " +
                                std::to_string(numel));
  BucketShard s;
  s.chunk = chunk_of(numel, world);
  s.padded = s.chunk * world;
  s.begin = std::min<int64_t>(numel, s.chunk * rank);
  s.end = std::min<int64_t>(numel, s.chunk * (rank + 1));
  for (size_t j = 0; j < offsets.size(); ++j) {
    const int64_t lo = std::max(s.begin, offsets[j]), hi = std::min(s.end, offsets[j] + numels[j]);
    if (lo < hi) s.pieces.push_back({j, lo - offsets[j], hi - offsets[j], lo});
  }
  return s;
}

}  // namespace plrt::ddp_sharded
