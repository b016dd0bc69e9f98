// pl::StagingLoader: batches equal loader.batch(b) in order (shuffled or not, resumed, any depth),
// the producer stays `depth` ahead, early destruction neither hangs nor leaks, the dataset's
// exceptions come out of next(), and on cuda (skipped without a GPU) batches the user keeps are
// never overwritten.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <plrt/sdk/staging.hpp>
#include <stdexcept>
#include <thread>

#include "sdk_test_support.hpp"

namespace {

using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

pl::Accelerator& cpu() {
  static pl::Accelerator acc(runtime(), "cpu");
  return acc;
}

// Rows i of field 0 are [i, i + 0.5, i + 0.25] (float32 [n, 3]); field 1 is i (int64 [n]).  Counts
// the batches it builds, can sleep in each, and throws from the batch containing row `bad_row`.
class CountingDataset : public pl::Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t bad_row = -1, int sleep_ms = 0)
      : n_(n), bad_row_(bad_row), sleep_ms_(sleep_ms) {
    std::vector<float> x;
    std::vector<int64_t> y;
    for (int64_t i = 0; i < n; ++i) {
      x.insert(x.end(), {float(i), float(i) + 0.5f, float(i) + 0.25f});
      y.push_back(i);
    }
    inner_ = std::make_unique<pl::TensorDataset>(
        std::vector<pl::Tensor>{pl::Tensor::from_vector(x, {n, 3}), pl::Tensor::from_vector(y, {n})});
  }
  int64_t size() const override { return n_; }
  pl::Batch get_batch(const std::vector<int64_t>& indices) const override {
    ++built;
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    for (int64_t i : indices)
      if (i == bad_row_) throw std::runtime_error("CountingDataset: row " + std::to_string(i) + " is corrupt");
    return inner_->get_batch(indices);
  }
  mutable std::atomic<int> built{0};

 private:
  int64_t n_, bad_row_;
  int sleep_ms_;
  std::unique_ptr<pl::TensorDataset> inner_;
};

std::vector<char> bytes_of(const pl::Tensor& t) {
  pl::Tensor h = t.to_host();
  const char* p = static_cast<const char*>(h.data());
  return std::vector<char>(p, p + h.nbytes());
}

void expect_same(const pl::Batch& got, const pl::Batch& want, const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t f = 0; f < got.size(); ++f) {
    EXPECT_EQ(got[f].dtype(), want[f].dtype()) << where << " field " << f;
    EXPECT_EQ(got[f].shape(), want[f].shape()) << where << " field " << f;
    EXPECT_TRUE(bytes_of(got[f]) == bytes_of(want[f])) << where << " field " << f << ": different values";
  }
}

// Runs a pass from `first` and checks every batch against loader.batch(b), in order.
void expect_pass(pl::StagingLoader& sl, pl::DataLoader& loader, int64_t first, const std::string& where) {
  sl.start(first);
  pl::Batch b;
  int64_t i = first;
  while (sl.next(b)) {
    ASSERT_LT(i, loader.num_batches()) << where << ": more batches than the epoch has";
    expect_same(b, loader.batch(i), where + " batch " + std::to_string(i));
    ++i;
  }
  EXPECT_EQ(i, loader.num_batches()) << where;
  EXPECT_FALSE(sl.next(b)) << where << ": the end repeats";
  EXPECT_TRUE(b.empty()) << where;
}

pl::DataLoader make_loader(std::shared_ptr<const pl::Dataset> ds, bool shuffle, int64_t batch = 7) {
  pl::DataLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = 1234;
  return pl::DataLoader(std::move(ds), o);
}

TEST(StagingLoader, EveryBatchEqualsTheLoadersInOrderShuffledOrNot) {
  auto ds = std::make_shared<CountingDataset>(50);  // 7 full batches of 7 and one of 1
  for (bool shuffle : {false, true}) {
    pl::DataLoader loader = make_loader(ds, shuffle);
    pl::StagingLoader sl(loader, cpu(), kCpu);
    EXPECT_FALSE(sl.staged());
    EXPECT_EQ(sl.num_batches(), 8);
    EXPECT_EQ(sl.depth(), 2);
    const std::string where = shuffle ? "shuffled" : "in order";
    expect_pass(sl, loader, 0, where + " epoch 0");
    loader.set_epoch(3);  // a new order when shuffling
    expect_pass(sl, loader, 0, where + " epoch 3");
  }
}

TEST(StagingLoader, ResumesFromTheMiddleAndChecksFirstBatch) {
  auto ds = std::make_shared<CountingDataset>(50);
  pl::DataLoader loader = make_loader(ds, true);
  loader.set_epoch(2);
  pl::StagingLoader sl(loader, cpu(), kCpu);
  expect_pass(sl, loader, 5, "resumed at 5");
  expect_pass(sl, loader, 8, "resumed at the end");  // an empty pass
  EXPECT_THAT(error_of([&] { sl.start(9); }), HasSubstr("first_batch 9 is outside [0, 8]"));
  EXPECT_THAT(error_of([&] { sl.start(-1); }), HasSubstr("first_batch -1"));
}

TEST(StagingLoader, DepthOneAndFourGiveTheSameBatchesAndStayThatFarAhead) {
  for (int depth : {1, 4}) {
    auto ds = std::make_shared<CountingDataset>(40);
    pl::DataLoader loader = make_loader(ds, true, 3);
    pl::StagingLoader sl(loader, cpu(), kCpu, depth);
    sl.start();
    // Nobody consumes: the producer fills `depth` batches and then waits.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (ds->built.load() < depth && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(ds->built.load(), depth) << "depth " << depth;
    pl::Batch b;
    ASSERT_TRUE(sl.next(b));  // one taken: one more is built
    while (ds->built.load() < depth + 1 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(ds->built.load(), depth + 1) << "depth " << depth;
    expect_pass(sl, loader, 0, "depth " + std::to_string(depth));
  }
}

TEST(StagingLoader, EarlyDestructionMidEpochDoesNotHang) {
  auto ds = std::make_shared<CountingDataset>(200, -1, 5);  // 5 ms per batch
  pl::DataLoader loader = make_loader(ds, false, 4);
  const auto t0 = Clock::now();
  {
    pl::StagingLoader sl(loader, cpu(), kCpu, 3);
    sl.start();
    pl::Batch b;
    ASSERT_TRUE(sl.next(b));
    ASSERT_TRUE(sl.next(b));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the producer is full and waiting
  }
  {
    pl::StagingLoader sl(loader, cpu(), kCpu, 3);
    sl.start();  // destroyed while the producer is inside the dataset
  }
  {
    pl::StagingLoader sl(loader, cpu(), kCpu);
    sl.start(10);
    sl.stop();
    sl.stop();  // twice is fine
    EXPECT_THAT(error_of([&] {
                  pl::Batch b;
                  sl.next(b);
                }),
                HasSubstr("call start() first"));
    expect_pass(sl, loader, 45, "after stop");  // and it starts again
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(StagingLoader, TheDatasetsExceptionComesOutOfNextWithItsMessage) {
  auto ds = std::make_shared<CountingDataset>(30, /*bad_row=*/13);
  pl::DataLoader loader = make_loader(ds, false, 4);  // row 13 is in batch 3
  pl::StagingLoader sl(loader, cpu(), kCpu, 2);
  sl.start();
  pl::Batch b;
  for (int64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(sl.next(b)) << i;
    expect_same(b, loader.batch(i), "batch " + std::to_string(i));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {  // the error sticks until start() or stop()
    try {
      sl.next(b);
      ADD_FAILURE() << "expected the dataset's exception";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("row 13 is corrupt"));
    }
  }
  // Resuming past the bad batch works.
  sl.start(4);
  ASSERT_TRUE(sl.next(b));
  expect_same(b, loader.batch(4), "after the error");
  // A pl::Error from the SDK's own dataset (an index outside it) also surfaces.
  auto tds = std::make_shared<pl::TensorDataset>(std::vector<pl::Tensor>{pl::Tensor::zeros({4})});
  struct BadIndex : pl::Dataset {
    std::shared_ptr<pl::TensorDataset> inner;
    int64_t size() const override { return 4; }
    pl::Batch get_batch(const std::vector<int64_t>&) const override { return inner->get_batch({7}); }
  };
  auto bad = std::make_shared<BadIndex>();
  bad->inner = tds;
  pl::DataLoader bad_loader(bad, pl::DataLoaderOptions{});
  pl::StagingLoader bad_sl(bad_loader, cpu(), kCpu);
  bad_sl.start();
  EXPECT_THAT(error_of([&] { bad_sl.next(b); }), HasSubstr("index 7"));
}

TEST(StagingLoader, BadArgumentsAreNamed) {
  auto ds = std::make_shared<CountingDataset>(10);
  pl::DataLoader loader = make_loader(ds, false);
  EXPECT_THAT(error_of([&] { pl::StagingLoader(loader, cpu(), kCpu, 0); }),
              HasSubstr("depth 0 is invalid; it must be >= 1"));
  EXPECT_THAT(error_of([&] { pl::StagingLoader(loader, cpu(), kCpu, -3); }), HasSubstr("depth -3"));
  EXPECT_THAT(error_of([&] {
                pl::StagingLoader(loader, cpu(), PL_Device{PL_DEVICE_CUDA, 0});
              }),
              HasSubstr("cuda:0 is not a device of accelerator 'cpu'"));
  pl::StagingLoader sl(loader, cpu(), kCpu);
  EXPECT_THAT(error_of([&] {
                pl::Batch b;
                sl.next(b);
              }),
              HasSubstr("no pass is running"));
  // A host-only loader needs no accelerator at all.
  pl::StagingLoader host_only(loader, pl::Accelerator(), kCpu);
  expect_pass(host_only, loader, 0, "no accelerator");
}

// ---- cuda: staged through pinned memory and a copy stream ----

class StagingCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      acc = pl::Accelerator(runtime(), "cuda");
    } catch (const pl::Error& e) {
      GTEST_SKIP() << "no cuda accelerator plugin: " << e.what();
    }
    if (acc.device_count() == 0) GTEST_SKIP() << "no GPU: " << acc.unavailable_reason();
    acc.set_device(0);
  }
  pl::Accelerator acc;
  const PL_Device gpu{PL_DEVICE_CUDA, 0};
};

TEST_F(StagingCuda, BatchesArriveOnTheDeviceWithTheLoadersValues) {
  auto ds = std::make_shared<CountingDataset>(1000);
  pl::DataLoader loader = make_loader(ds, true, 64);  // 15 of 64 and one of 40
  for (int depth : {1, 2, 4}) {
    pl::StagingLoader sl(loader, acc, gpu, depth);
    EXPECT_TRUE(sl.staged());
    for (int epoch = 0; epoch < 2; ++epoch) {  // the second pass reuses the slots' buffers
      loader.set_epoch(epoch);
      sl.start();
      pl::Batch b;
      int64_t i = 0;
      while (sl.next(b)) {
        for (const auto& t : b) EXPECT_EQ(t.device().type, PL_DEVICE_CUDA);
        expect_same(b, loader.batch(i), "depth " + std::to_string(depth) + " batch " + std::to_string(i));
        ++i;
      }
      EXPECT_EQ(i, loader.num_batches());
    }
  }
}

TEST_F(StagingCuda, BatchesTheUserKeepsAreNeverOverwritten) {
  auto ds = std::make_shared<CountingDataset>(300);
  pl::DataLoader loader = make_loader(ds, true, 16);
  pl::StagingLoader sl(loader, acc, gpu, 1);  // two slots: every batch would reuse one
  sl.start();
  std::vector<pl::Batch> kept;
  pl::Batch b;
  while (sl.next(b)) kept.push_back(b);
  ASSERT_EQ(static_cast<int64_t>(kept.size()), loader.num_batches());
  for (size_t i = 0; i < kept.size(); ++i)
    expect_same(kept[i], loader.batch(static_cast<int64_t>(i)), "kept batch " + std::to_string(i));
  // Every kept batch has its own device memory.
  for (size_t i = 1; i < kept.size(); ++i) EXPECT_NE(kept[i][0].data(), kept[i - 1][0].data()) << i;
}

TEST_F(StagingCuda, EarlyDestructionAndDatasetErrors) {
  auto ds = std::make_shared<CountingDataset>(500, /*bad_row=*/300);
  pl::DataLoader loader = make_loader(ds, false, 10);
  {
    pl::StagingLoader sl(loader, acc, gpu, 3);
    sl.start();
    pl::Batch b;
    ASSERT_TRUE(sl.next(b));
  }
  pl::StagingLoader sl(loader, acc, gpu, 2);
  sl.start(25);
  pl::Batch b;
  for (int64_t i = 25; i < 30; ++i) {
    ASSERT_TRUE(sl.next(b));
    expect_same(b, loader.batch(i), "batch " + std::to_string(i));
  }
  EXPECT_THROW(sl.next(b), std::runtime_error);  // batch 30 holds row 300
}

}  // namespace
