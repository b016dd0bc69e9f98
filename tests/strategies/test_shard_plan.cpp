// ddp_sharded's shard arithmetic (plrt_ddp_sharded_core's shard_plan), called directly: the pieces of
// every rank tile each bucket exactly once, and the largest rank's share stays within one element
// per bucket of total / W on skewed parameter sizes (one huge parameter, many tiny ones, sizes not
// divisible by W, W larger than some parameters) — the case whole-parameter partitions cannot
// balance.  The reference is a plain element-by-element count, independent of the plan's formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "shard_plan.hpp"

namespace {

using plrt::ddp_sharded::BucketShard;
using plrt::ddp_sharded::shard_bucket;

struct Layout {
  std::vector<int64_t> offsets, numels;
  int64_t total = 0;
};

Layout layout(const std::vector<int64_t>& sizes) {
  Layout l;
  for (int64_t n : sizes) {
    l.offsets.push_back(l.total);
    l.numels.push_back(n);
    l.total += n;
  }
  return l;
}

// Each element of the bucket is owned by exactly one rank, the pieces say where it lies, and each
// piece stays inside its member.
void expect_tiles(const Layout& l, int world) {
  std::vector<int> owner(static_cast<size_t>(l.total), -1);
  for (int r = 0; r < world; ++r) {
    const BucketShard s = shard_bucket(l.offsets, l.numels, l.total, world, r);
    EXPECT_EQ(s.padded, s.chunk * world);
    EXPECT_GE(s.padded, l.total);
    for (const auto& p : s.pieces) {
      ASSERT_LT(p.member, l.numels.size());
      ASSERT_LE(0, p.param_begin);
      ASSERT_LT(p.param_begin, p.param_end);
      ASSERT_LE(p.param_end, l.numels[p.member]);
      EXPECT_EQ(p.flat_offset, l.offsets[p.member] + p.param_begin);
      for (int64_t e = p.flat_offset; e < p.flat_offset + (p.param_end - p.param_begin); ++e) {
        EXPECT_EQ(owner[static_cast<size_t>(e)], -1) << "element " << e << " owned twice";
        owner[static_cast<size_t>(e)] = r;
        EXPECT_GE(e, s.chunk * r);  // inside chunk r of the equal-count collectives
        EXPECT_LT(e, s.chunk * (r + 1));
      }
    }
  }
  for (int64_t e = 0; e < l.total; ++e) EXPECT_NE(owner[static_cast<size_t>(e)], -1) << "element " << e;
}

int64_t owned_by(const Layout& l, int world, int rank) {
  int64_t n = 0;
  for (const auto& p : shard_bucket(l.offsets, l.numels, l.total, world, rank).pieces) n += p.param_end - p.param_begin;
  return n;
}

TEST(ShardPlan, PiecesTileEveryBucketOnce) {
  for (int world : {1, 2, 3, 4, 7})
    for (const auto& sizes : std::vector<std::vector<int64_t>>{
             {100352, 128, 1280, 10}, {5}, {1, 1, 1}, {3, 0, 4}, {7, 11, 13, 17}, {1000}, {1, 999, 1}})
      expect_tiles(layout(sizes), world);
}

TEST(ShardPlan, SkewedSizesStayBalancedWithinOneElementPerBucket) {
  // The sample model's shape: the first layer is 86 % of the parameters.  Whole-parameter
  // partitions put it on one rank; element ranges split it.
  const std::vector<std::vector<int64_t>> buckets = {{10, 1280, 128, 100352},
                                                     {1, 1, 1, 1, 1, 1, 1, 1, 1, 99991},
                                                     {3, 2},  // W larger than these parameters
                                                     {65537}};
  for (int world : {2, 3, 4, 8}) {
    std::vector<int64_t> share(static_cast<size_t>(world), 0);
    int64_t total = 0;
    for (const auto& sizes : buckets) {
      const Layout l = layout(sizes);
      total += l.total;
      for (int r = 0; r < world; ++r) share[static_cast<size_t>(r)] += owned_by(l, world, r);
    }
    EXPECT_EQ(std::accumulate(share.begin(), share.end(), int64_t{0}), total);
    const int64_t largest = *std::max_element(share.begin(), share.end());
    const double ideal = static_cast<double>(total) / world;
    EXPECT_LT(static_cast<double>(largest) - ideal, static_cast<double>(buckets.size())) << "W=" << world;
    EXPECT_LE(static_cast<double>(largest), ideal * 1.01) << "W=" << world;
  }
}

TEST(ShardPlan, RanksPastTheEndOfASmallBucketOwnNothing) {
  const Layout l = layout({2});
  EXPECT_EQ(owned_by(l, 4, 0), 1);
  EXPECT_EQ(owned_by(l, 4, 1), 1);
  EXPECT_EQ(owned_by(l, 4, 2), 0);
  EXPECT_EQ(owned_by(l, 4, 3), 0);
}

TEST(ShardPlan, BadArgumentsAreRefused) {
  const Layout l = layout({4, 4});
  EXPECT_THROW(shard_bucket(l.offsets, l.numels, l.total, 0, 0), std::invalid_argument);
  EXPECT_THROW(shard_bucket(l.offsets, l.numels, l.total, 2, 2), std::invalid_argument);
  EXPECT_THROW(shard_bucket(l.offsets, l.numels, l.total, 2, -1), std::invalid_argument);
  EXPECT_THROW(shard_bucket({0, 5}, {4, 4}, 8, 2, 0), std::invalid_argument);  // a gap
  EXPECT_THROW(shard_bucket(l.offsets, l.numels, 9, 2, 0), std::invalid_argument);
}

}  // namespace
