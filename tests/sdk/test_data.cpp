// TensorDataset, DistributedSampler (torch.utils.data.DistributedSampler's index lists, worked out
// by hand from torch's code) and DataLoader.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <plrt/sdk/data.hpp>
#include <set>

#include "sdk_test_support.hpp"

namespace {

using sdk_test::error_or_none;

using Indices = std::vector<int64_t>;

#define EXPECT_ERROR_HAS(stmt, text) \
  EXPECT_NE(error_or_none([&] { stmt; }).find(text), std::string::npos) << error_or_none([&] { stmt; })

Indices rank_indices(int64_t n, int w, int r, bool shuffle = false, uint64_t seed = 0, bool drop_last = false,
                     int64_t epoch = 0) {
  pl::DistributedSampler s(n, w, r, shuffle, seed, drop_last);
  s.set_epoch(epoch);
  Indices v = s.indices();
  EXPECT_EQ(static_cast<int64_t>(v.size()), s.num_samples());
  return v;
}

// The list before sharding, rebuilt from the ranks' shares (rank r holds positions r, r+W, ...).
Indices interleave(int64_t n, int w, bool shuffle, uint64_t seed, bool drop_last, int64_t epoch) {
  std::vector<Indices> per(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) per[static_cast<size_t>(r)] = rank_indices(n, w, r, shuffle, seed, drop_last, epoch);
  Indices all;
  for (size_t i = 0; i < per[0].size(); ++i)
    for (int r = 0; r < w; ++r) all.push_back(per[static_cast<size_t>(r)][i]);
  return all;
}

TEST(DistributedSampler, PadsByWrapAround) {  // N=10, W=3: 4 each, 2 padded from the start
  pl::DistributedSampler s(10, 3, 0, /*shuffle=*/false);
  EXPECT_EQ(s.num_samples(), 4);
  EXPECT_EQ(s.total_size(), 12);
  EXPECT_EQ(s.padding(), 2);
  EXPECT_EQ(rank_indices(10, 3, 0), (Indices{0, 3, 6, 9}));
  EXPECT_EQ(rank_indices(10, 3, 1), (Indices{1, 4, 7, 0}));
  EXPECT_EQ(rank_indices(10, 3, 2), (Indices{2, 5, 8, 1}));
}

TEST(DistributedSampler, PadsSeveralTimesOverWhenPaddingExceedsN) {  // N=2, W=5: list 0,1,0,1,0
  pl::DistributedSampler s(2, 5, 0, false);
  EXPECT_EQ(s.num_samples(), 1);
  EXPECT_EQ(s.padding(), 3);
  EXPECT_EQ(interleave(2, 5, false, 0, false, 0), (Indices{0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  pl::DistributedSampler s(10, 3, 0, false, 0, /*drop_last=*/true);
  EXPECT_EQ(s.num_samples(), 3);  // ceil((10 - 3) / 3)
  EXPECT_EQ(s.total_size(), 9);
  EXPECT_EQ(s.padding(), 0);
  EXPECT_EQ(rank_indices(10, 3, 2, false, 0, true), (Indices{2, 5, 8}));
  EXPECT_EQ(interleave(10, 3, false, 0, true, 0), (Indices{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  // N < W: ceil(negative fraction) = 0 samples per rank.
  EXPECT_EQ(pl::DistributedSampler(2, 5, 4, false, 0, true).num_samples(), 0);
  EXPECT_TRUE(rank_indices(2, 5, 4, false, 0, true).empty());
  // N divisible by W: drop_last changes nothing.
  EXPECT_EQ(pl::DistributedSampler(9, 3, 0, false, 0, true).num_samples(), 3);
  EXPECT_EQ(rank_indices(9, 3, 1, false, 0, true), rank_indices(9, 3, 1, false, 0, false));
  EXPECT_EQ(pl::DistributedSampler(0, 3, 1, true).num_samples(), 0);
}

TEST(DistributedSampler, ShuffleIsOnePermutationSharedByRanksAndNewEachEpoch) {
  const Indices e0 = interleave(10, 3, true, 42, false, 0);
  ASSERT_EQ(e0.size(), 12u);
  // The first N positions are a permutation of [0, N); the padding repeats its start.
  Indices head(e0.begin(), e0.begin() + 10);
  Indices sorted = head;
  std::sort(sorted.begin(), sorted.end());
  Indices want(10);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted, want);
  EXPECT_NE(head, want) << "shuffle=true returned the identity order";
  EXPECT_EQ(e0[10], e0[0]);
  EXPECT_EQ(e0[11], e0[1]);
  // Reproducible (every rank draws the same list), different for another epoch or seed.
  EXPECT_EQ(interleave(10, 3, true, 42, false, 0), e0);
  const Indices e1 = interleave(10, 3, true, 42, false, 1);
  EXPECT_NE(Indices(e1.begin(), e1.begin() + 10), head);
  EXPECT_NE(interleave(10, 3, true, 7, false, 0), e0);
  // seed + epoch: seed 41 at epoch 1 is seed 42 at epoch 0.
  EXPECT_EQ(interleave(10, 3, true, 41, false, 1), e0);
}

TEST(DistributedSampler, UnionOfRanksCoversEveryIndex) {
  for (int64_t n : {1, 7, 10, 64, 101})
    for (int w : {1, 2, 3, 8})
      for (bool shuffle : {false, true}) {
        std::set<int64_t> seen;
        for (int r = 0; r < w; ++r)
          for (int64_t i : rank_indices(n, w, r, shuffle, 3, false, 5)) {
            ASSERT_GE(i, 0);
            ASSERT_LT(i, n);
            seen.insert(i);
          }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "n=" << n << " w=" << w << " shuffle=" << shuffle;
      }
}

TEST(DistributedSampler, BadArgumentsAreNamed) {
  EXPECT_ERROR_HAS(pl::DistributedSampler(10, 0, 0), "num_replicas 0");
  EXPECT_ERROR_HAS(pl::DistributedSampler(10, 3, 3), "rank 3 is outside [0, 3)");
  EXPECT_ERROR_HAS(pl::DistributedSampler(10, 3, -1), "rank -1");
  EXPECT_ERROR_HAS(pl::DistributedSampler(-4, 3, 0), "dataset size -4");
}

// x: f32 [n, 2] with row i = {i, 10 i}; y: i64 [n] = i.
std::shared_ptr<pl::TensorDataset> rows(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(10 * i));
    y.push_back(i);
  }
  return std::make_shared<pl::TensorDataset>(
      std::vector<pl::Tensor>{pl::Tensor::from_vector(x, {n, 2}), pl::Tensor::from_vector(y, {n})});
}

// The sample ids of a batch, checking that x and y agree.
Indices ids(const pl::Batch& b) {
  EXPECT_EQ(b.size(), 2u);
  Indices y = b[1].to_vector<int64_t>();
  std::vector<float> x = b[0].to_vector<float>();
  EXPECT_EQ(b[0].shape(), (pl::Shape{static_cast<int64_t>(y.size()), 2}));
  for (size_t k = 0; k < y.size(); ++k) {
    EXPECT_EQ(x[2 * k], static_cast<float>(y[k]));
    EXPECT_EQ(x[2 * k + 1], static_cast<float>(10 * y[k]));
  }
  return y;
}

TEST(TensorDataset, GathersRowsOfAnyDtypeAndTrailingShape) {
  std::vector<uint8_t> bytes(4 * 2 * 3);
  std::iota(bytes.begin(), bytes.end(), 0);
  pl::TensorDataset ds({pl::Tensor::from_vector(bytes, {4, 2, 3}), pl::Tensor::from_vector<double>({0, 1, 2, 3}, {4})});
  EXPECT_EQ(ds.size(), 4);
  pl::Batch b = ds.get_batch({3, 0, 3});
  EXPECT_EQ(b[0].shape(), (pl::Shape{3, 2, 3}));
  EXPECT_EQ(b[0].dtype(), PL_U8);
  EXPECT_EQ(b[0].to_vector<uint8_t>(),
            (std::vector<uint8_t>{18, 19, 20, 21, 22, 23, 0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(b[1].to_vector<double>(), (std::vector<double>{3, 0, 3}));
  EXPECT_EQ(ds.get_batch({})[0].shape(), (pl::Shape{0, 2, 3}));
  EXPECT_ERROR_HAS(ds.get_batch({1, 4}), "index 4 (position 1) is outside [0, 4)");
  EXPECT_ERROR_HAS(ds.get_batch({-1}), "index -1");
}

TEST(TensorDataset, RejectsBadFields) {
  EXPECT_ERROR_HAS(pl::TensorDataset({}), "at least one field");
  EXPECT_ERROR_HAS(pl::TensorDataset({pl::Tensor::zeros({3, 2}), pl::Tensor::zeros({4})}),
                   "field 1 has 4 rows (shape [4]) but field 0 has 3");
  EXPECT_ERROR_HAS(pl::TensorDataset({pl::Tensor::zeros({})}), "field 0 is 0-d");
  EXPECT_ERROR_HAS(pl::TensorDataset({pl::Tensor()}), "undefined");
}

TEST(DataLoader, BatchesInOrderWithAShortLastBatch) {
  pl::DataLoader dl(rows(10), {/*batch_size=*/3});
  EXPECT_EQ(dl.num_samples(), 10);
  EXPECT_EQ(dl.num_batches(), 4);
  EXPECT_EQ(ids(dl.batch(0)), (Indices{0, 1, 2}));
  EXPECT_EQ(ids(dl.batch(1)), (Indices{3, 4, 5}));
  EXPECT_EQ(ids(dl.batch(3)), (Indices{9}));
  EXPECT_ERROR_HAS(dl.batch(4), "batch(4): the epoch has 4 batches, valid indices are [0, 4)");
  EXPECT_ERROR_HAS(dl.batch(-1), "batch(-1)");
}

TEST(DataLoader, DropLastDropsTheIncompleteBatch) {
  pl::DataLoaderOptions o;
  o.batch_size = 3;
  o.drop_last = true;
  pl::DataLoader dl(rows(10), o);
  EXPECT_EQ(dl.num_batches(), 3);
  EXPECT_EQ(ids(dl.batch(2)), (Indices{6, 7, 8}));
  EXPECT_THROW(dl.batch(3), pl::Error);
  o.batch_size = 11;
  EXPECT_EQ(pl::DataLoader(rows(10), o).num_batches(), 0);
}

TEST(DataLoader, ShuffleVisitsEverySampleOnceInANewOrderEachEpoch) {
  pl::DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.seed = 5;
  pl::DataLoader dl(rows(10), o);
  auto epoch_order = [&](int64_t epoch) {
    dl.set_epoch(epoch);
    Indices all;
    for (int64_t b = 0; b < dl.num_batches(); ++b)
      for (int64_t i : ids(dl.batch(b))) all.push_back(i);
    return all;
  };
  Indices e0 = epoch_order(0), e1 = epoch_order(1);
  Indices sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  Indices want(10);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted, want);
  EXPECT_NE(e0, want);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(epoch_order(0), e0);  // the same seed and epoch give the same order
  dl.set_seed(6);
  EXPECT_EQ(epoch_order(0), e1);  // seed + epoch: (6, 0) draws what (5, 1) drew
}

TEST(DataLoader, DistributeShardsThroughTheSampler) {
  pl::DataLoader dl(rows(10), {/*batch_size=*/2});
  EXPECT_FALSE(dl.distributed());
  dl.distribute(3, 1);
  ASSERT_TRUE(dl.distributed());
  EXPECT_EQ(dl.sampler()->rank(), 1);
  EXPECT_EQ(dl.num_samples(), 4);
  EXPECT_EQ(dl.num_batches(), 2);
  EXPECT_EQ(ids(dl.batch(0)), (Indices{1, 4}));
  EXPECT_EQ(ids(dl.batch(1)), (Indices{7, 0}));  // the wrap-around padding
  EXPECT_THROW(dl.distribute(3, 5), pl::Error);

  pl::DataLoaderOptions o;
  o.batch_size = 2;
  o.drop_last = true;
  pl::DataLoader dropped(rows(10), o);
  dropped.distribute(3, 2);
  EXPECT_TRUE(dropped.sampler()->drop_last());
  EXPECT_EQ(dropped.num_samples(), 3);  // 2, 5, 8
  EXPECT_EQ(dropped.num_batches(), 1);
  EXPECT_EQ(ids(dropped.batch(0)), (Indices{2, 5}));
}

TEST(DataLoader, DistributedShuffleFollowsSeedAndEpoch) {
  pl::DataLoaderOptions o;
  o.batch_size = 100;
  o.shuffle = true;
  o.seed = 9;
  auto shard = [&](int rank, int64_t epoch, uint64_t seed) {
    pl::DataLoader dl(rows(10), o);
    dl.set_epoch(epoch);
    dl.distribute(2, rank);
    dl.set_seed(seed);
    return ids(dl.batch(0));
  };
  EXPECT_EQ(shard(0, 3, 9), rank_indices(10, 2, 0, true, 9, false, 3));
  EXPECT_EQ(shard(1, 3, 9), rank_indices(10, 2, 1, true, 9, false, 3));
  EXPECT_EQ(shard(1, 3, 11), rank_indices(10, 2, 1, true, 11, false, 3));
  pl::DataLoader dl(rows(10), o);
  dl.distribute(2, 0);
  Indices before = ids(dl.batch(0));
  dl.set_epoch(4);
  EXPECT_EQ(dl.sampler()->epoch(), 4);
  EXPECT_NE(ids(dl.batch(0)), before);
}

TEST(DataLoader, BadOptionsAreNamed) {
  pl::DataLoaderOptions o;
  o.batch_size = 0;
  EXPECT_ERROR_HAS(pl::DataLoader(rows(3), o), "batch_size 0");
  EXPECT_ERROR_HAS(pl::DataLoader(nullptr, {}), "dataset is null");
}

}  // namespace
