// Resuming a DataLoader inside an epoch, possibly at another world size (DataLoader::set_start,
// DistributedSampler::set_start): the positions k batches consumed on W ranks are the first k*B*W
// of the epoch's order (the order one rank walks, worked out independently of the sharding), and
// the rest of the epoch split over W' ranks holds every other sample once, plus the padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <plrt/sdk/data.hpp>

#include "sdk_test_support.hpp"

namespace {

using sdk_test::error_or_none;
using Indices = std::vector<int64_t>;

#define EXPECT_ERROR_HAS(stmt, text) \
  EXPECT_NE(error_or_none([&] { stmt; }).find(text), std::string::npos) << error_or_none([&] { stmt; })

std::shared_ptr<pl::TensorDataset> rows(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return std::make_shared<pl::TensorDataset>(std::vector<pl::Tensor>{pl::Tensor::from_vector(v, {n})});
}

Indices ids(const pl::Batch& b) { return b.at(0).to_vector<int64_t>(); }

pl::DataLoaderOptions opts(int64_t batch, bool shuffle, bool drop_last = false) {
  pl::DataLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = 17;
  return o;
}

// The epoch's order as one process without a sampler walks it (the global order).
Indices global_order(int64_t n, bool shuffle, int64_t epoch) {
  pl::DataLoader dl(rows(n), opts(n, shuffle));
  dl.set_epoch(epoch);
  return ids(dl.batch(0));
}

struct Case {
  int64_t n;
  int w;
  int64_t b, k;  // k batches of b on each of w ranks ...
  int w2;
  int64_t b2;  // ... then the rest of the epoch on w2 ranks in batches of b2
  bool shuffle;
};

// Runs the case; returns how many times each sample was handed out, and checks the positions.
std::map<int64_t, int> run_case(const Case& c, int64_t epoch, int64_t* real_total) {
  std::map<int64_t, int> seen;
  const Indices order = global_order(c.n, c.shuffle, epoch);
  Indices first;
  int64_t position = -1;
  *real_total = 0;
  for (int r = 0; r < c.w; ++r) {
    pl::DataLoader dl(rows(c.n), opts(c.b, c.shuffle));
    dl.set_epoch(epoch);
    dl.distribute(c.w, r);
    for (int64_t i = 0; i < c.k; ++i) {
      for (int64_t x : ids(dl.batch(i))) first.push_back(x), ++seen[x];
      if (r == 0) *real_total += dl.real_samples(i);
    }
    const int64_t p = dl.position_after(c.k);
    if (position >= 0) {
      EXPECT_EQ(p, position) << "every rank computes the same position";
    }
    position = p;
  }
  EXPECT_EQ(position, c.k * c.b * c.w);
  // The positions consumed are the order's first k*B*W (as a set: the ranks interleave them).
  Indices want(order.begin(), order.begin() + position);
  std::sort(first.begin(), first.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(first, want);
  for (int r = 0; r < c.w2; ++r) {
    pl::DataLoader dl(rows(c.n), opts(c.b2, c.shuffle));
    dl.set_epoch(epoch);
    dl.distribute(c.w2, r);
    dl.set_start(position);
    EXPECT_EQ(dl.sampler()->start(), position);
    for (int64_t i = 0; i < dl.num_batches(); ++i) {
      for (int64_t x : ids(dl.batch(i))) ++seen[x];
      if (r == 0) *real_total += dl.real_samples(i);
    }
    EXPECT_EQ(dl.position_after(dl.num_batches()), c.n);
  }
  return seen;
}

TEST(DataResume, AnotherWorldSizeTrainsEveryRemainingSampleOnce) {
  for (const Case& c : {Case{60, 3, 2, 4, 2, 2, true}, Case{60, 2, 2, 3, 3, 2, true}, Case{60, 3, 2, 4, 2, 5, false},
                        Case{48, 4, 3, 2, 1, 7, true}, Case{48, 1, 5, 4, 4, 3, true}}) {
    for (int64_t epoch : {0, 3}) {
      int64_t real = 0;
      auto seen = run_case(c, epoch, &real);
      EXPECT_EQ(static_cast<int64_t>(seen.size()), c.n) << c.n << " " << c.w << "->" << c.w2;
      for (auto [x, times] : seen) EXPECT_EQ(times, 1) << "sample " << x << ", " << c.w << "->" << c.w2;
      EXPECT_EQ(real, c.n);
    }
  }
}

TEST(DataResume, PaddingRepeatsTheEpochsFirstSamplesAndIsNotCounted) {
  // N=60, 4 batches of 2 on 2 ranks = 16 consumed; 44 left on 3 ranks: 15 each, 1 padded.
  Case c{60, 2, 2, 4, 3, 4, true};
  int64_t real = 0;
  auto seen = run_case(c, 1, &real);
  EXPECT_EQ(real, 60);  // the duplicate is not a trained sample
  const Indices order = global_order(60, true, 1);
  for (auto [x, times] : seen) EXPECT_EQ(times, x == order[0] ? 2 : 1) << x;
  pl::DistributedSampler s(60, 3, 2, true, 17);
  s.set_start(16);
  EXPECT_EQ(s.num_samples(), 15);
  EXPECT_EQ(s.padding(), 1);
}

TEST(DataResume, DropLastCutsTheRemaindersTail) {
  pl::DistributedSampler s(10, 3, 0, false, 0, /*drop_last=*/true);
  s.set_start(2);  // 8 left on 3 ranks: 2 each, positions 8 and 9 cut
  EXPECT_EQ(s.num_samples(), 2);
  EXPECT_EQ(s.indices(), (Indices{2, 5}));
  EXPECT_EQ(s.padding(), 0);
  EXPECT_EQ(s.real_samples(0, 2), 6);
}

TEST(DataResume, PlainLoaderSkipsItsOwnFirstPositions) {
  pl::DataLoader dl(rows(10), opts(4, true));
  dl.set_epoch(2);
  const Indices order = global_order(10, true, 2);
  dl.set_start(3);
  EXPECT_EQ(dl.num_samples(), 7);
  EXPECT_EQ(dl.num_batches(), 2);
  EXPECT_EQ(ids(dl.batch(0)), Indices(order.begin() + 3, order.begin() + 7));
  EXPECT_EQ(ids(dl.batch(1)), Indices(order.begin() + 7, order.end()));
  EXPECT_EQ(dl.real_samples(1), 3);
  EXPECT_EQ(dl.position_after(1), 7);
  EXPECT_EQ(dl.position_after(2), 10);
  dl.set_epoch(3);  // another epoch starts at its beginning
  EXPECT_EQ(dl.start(), 0);
  EXPECT_EQ(dl.num_samples(), 10);
  dl.set_start(10);  // a finished epoch: nothing left
  EXPECT_EQ(dl.num_batches(), 0);
  EXPECT_EQ(dl.position_after(0), 10);
}

TEST(DataResume, DistributeKeepsTheStart) {
  pl::DataLoader dl(rows(12), opts(2, false));
  dl.set_start(6);
  dl.distribute(3, 1);
  EXPECT_EQ(dl.sampler()->start(), 6);
  EXPECT_EQ(dl.indices(), (Indices{7, 10}));
}

TEST(DataResume, BadStartsAndCountsAreNamed) {
  pl::DataLoader dl(rows(10), opts(4, false));
  EXPECT_ERROR_HAS(dl.set_start(-1), "set_start(-1)");
  EXPECT_ERROR_HAS(dl.set_start(11), "[0, 10]");
  EXPECT_ERROR_HAS(dl.real_samples(3), "real_samples(3)");
  EXPECT_ERROR_HAS(dl.position_after(4), "position_after(4)");
  pl::DistributedSampler s(10, 2, 0);
  EXPECT_ERROR_HAS(s.set_start(12), "start 12 is outside [0, 10]");
}

}  // namespace
