// The step that reads nothing on the host (issue 30): pl::Scalar on its own, and a Trainer whose
// steps log a deferred loss without reading it, whose values then equal an independent sum of the
// losses read step by step.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <plrt/sdk/scalar.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "callback_test_support.hpp"
#include "sdk_test_support.hpp"

namespace {

using callback_test::FitRun;
using callback_test::Scripted;
namespace fs = std::filesystem;

TEST(Scalar, ADeferredValueIsReadOnceOnFirstUseAndSharedByCopies) {
  int reads = 0;
  pl::Scalar s = pl::Scalar::deferred([&] { return ++reads, 2.5; });
  EXPECT_FALSE(s.ready());
  pl::Scalar copy = s;
  const pl::Scalar twice = s * 2.0, sum = s + copy, mapped = s.map([](double x) { return -x; });
  EXPECT_EQ(reads, 0) << "arithmetic and map must not read their operands";
  EXPECT_FALSE(twice.ready());
  const uint64_t before = pl::Scalar::deferred_reads();
  EXPECT_DOUBLE_EQ(twice.value(), 5.0);
  EXPECT_EQ(reads, 1);
  EXPECT_TRUE(s.ready()) << "a copy's read is the original's";
  EXPECT_DOUBLE_EQ(copy.value(), 2.5);
  EXPECT_DOUBLE_EQ(sum.value(), 5.0);
  EXPECT_DOUBLE_EQ(mapped.value(), -2.5);
  EXPECT_DOUBLE_EQ(static_cast<double>(s / 5.0 - 1.0), -0.5);
  EXPECT_EQ(reads, 1);
  EXPECT_GE(pl::Scalar::deferred_reads(), before + 1);
}

TEST(Scalar, ReadyOperandsGiveAReadyResultAndDoublesConvert) {
  pl::Scalar a = 3.0, b = 4.0;
  EXPECT_TRUE(a.ready());
  const pl::Scalar c = a * b + 1.0;
  EXPECT_TRUE(c.ready());
  EXPECT_DOUBLE_EQ(c.value(), 13.0);
  EXPECT_TRUE(pl::Scalar().ready());
  EXPECT_DOUBLE_EQ(pl::Scalar().value(), 0.0);
}

TEST(Scalar, AFailedReadThrowsAgainOnTheNextTry) {
  int tries = 0;
  pl::Scalar s = pl::Scalar::deferred([&]() -> double {
    ++tries;
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "label 7 is outside [0, 3)");
  });
  EXPECT_THROW(s.value(), pl::Error);
  EXPECT_FALSE(s.ready());
  EXPECT_THROW(s.value(), pl::Error);
  EXPECT_EQ(tries, 2);
}

TEST(Scalar, FromTensorReadsItsOneElementAndRefusesOthers) {
  pl::Tensor t = pl::Tensor::from_vector<float>({0.75f}, {1});
  const pl::Scalar s = pl::Scalar::from_tensor(t, 2.0);
  EXPECT_FALSE(s.ready());
  EXPECT_DOUBLE_EQ(s.value(), 1.5);
  try {
    pl::Scalar::from_tensor(pl::Tensor::from_vector<float>({1, 2}, {2}));
    FAIL() << "two elements were taken";
  } catch (const pl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32 [2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pl::Scalar::from_tensor(pl::Tensor::from_vector<int64_t>({1}, {1})), pl::Error);
  EXPECT_THROW(pl::Scalar::deferred(nullptr), pl::Error);
}

TEST(Scalar, CrossEntropyDefersItsLossAndCountsTheCpusLabelsAtOnce) {
  pl::Generator g(3);
  pl::nn::Linear fc(4, 3, true, &g);
  pl::Accelerator acc(sdk_test::runtime(), "cpu");
  fc.to(acc, sdk_test::kCpu);
  const pl::Tensor xs = pl::Tensor::from_vector<float>(
      {0.1f, 0.2f, -0.3f, 0.4f, 1.0f, -1.0f, 0.5f, 0.0f, -0.2f, 0.3f, 0.9f, -0.4f}, {3, 4});
  const pl::Tensor ys = pl::Tensor::from_vector<int64_t>({0, 1, 2}, {3});
  auto ce = pl::nn::cross_entropy(fc.forward(xs), ys, false);
  EXPECT_FALSE(ce.loss.ready());
  // the cpu is synchronous: the labels (the caller's memory, maybe refilled next step) are counted now
  EXPECT_TRUE(ce.correct.ready());
  EXPECT_TRUE(ce.accuracy().ready());
  EXPECT_EQ(ce.count, 3);
  const double accuracy = ce.accuracy().value();
  EXPECT_DOUBLE_EQ(accuracy, ce.correct.value() / 3.0);
  EXPECT_TRUE(std::isfinite(ce.loss.value()));
  EXPECT_GT(ce.loss.value(), 0.0);
}

// Records each step's deferred-read count (without reading the loss) or, when `eager`, each
// step's loss, read at once.
struct Watch : pl::Callback {
  bool eager = false;
  std::vector<uint64_t> reads_at_end;
  std::vector<double> losses;
  void on_train_batch_end(pl::Trainer&, pl::LightningBase&, const pl::Scalar& loss, const pl::Batch&,
                          int64_t) override {
    if (eager) losses.push_back(loss.value());
    reads_at_end.push_back(pl::Scalar::deferred_reads());
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Scripted's layer, logging its loss per step and per epoch (train_loss_step, train_loss_epoch)
// and its accuracy per epoch, all deferred.
struct Logs : Scripted {
  pl::Scalar training_step(const pl::Batch& b, int64_t) override {
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1));
    fc.backward(ce.grad, false);
    pl::LogOptions both;
    both.on_epoch = true;
    log("train_loss", ce.loss, both);
    pl::LogOptions epoch_only;
    epoch_only.on_step = false;
    epoch_only.on_epoch = true;
    log("train_acc", ce.accuracy(), epoch_only);
    return ce.loss;
  }
};

struct Fit {
  std::map<std::string, double> metrics;
  std::string csv;
};

Fit fit_with(const std::shared_ptr<Watch>& watch, int64_t log_every) {
  FitRun run;
  run.o.max_epochs = 3;
  run.o.enable_progress_bar = false;
  run.o.log_every_n_steps = log_every;
  run.o.callbacks = {watch};
  Logs m;
  Fit out;
  run.fit(m, /*with_val=*/false, "", [&](pl::Trainer& t) { out.metrics = t.callback_metrics(); });
  for (const auto& e : fs::recursive_directory_iterator(run.dir))
    if (e.path().filename() == "metrics.csv") out.csv = read_text(e.path());
  return out;
}

TEST(DeferredStep, StepsReadNothingUntilTheEpochEndsAndTheNumbersEqualEagerReads) {
  auto lazy = std::make_shared<Watch>();
  const Fit quiet = fit_with(lazy, /*log_every=*/1000);  // no logger row, no bar, no reading callback
  ASSERT_EQ(lazy->reads_at_end.size(), 9u);              // 3 epochs of 3 batches
  for (size_t e = 0; e < 3; ++e)
    for (size_t b = 1; b < 3; ++b)
      EXPECT_EQ(lazy->reads_at_end[e * 3 + b], lazy->reads_at_end[e * 3])
          << "epoch " << e << " batch " << b << ": a step read a deferred value on the host";
  EXPECT_GT(lazy->reads_at_end[3], lazy->reads_at_end[2]) << "the epoch's end reads what the epoch logged";

  auto eager = std::make_shared<Watch>();
  eager->eager = true;
  const Fit read = fit_with(eager, 1000);
  ASSERT_EQ(eager->losses.size(), 9u);
  EXPECT_EQ(quiet.metrics, read.metrics) << "reading late must give the numbers of reading at once";
  EXPECT_EQ(quiet.csv, read.csv);
  // train_loss_epoch of the last epoch: the mean of its three batch losses (4 rows each), summed here
  const double want = (eager->losses[6] + eager->losses[7] + eager->losses[8]) / 3.0;
  ASSERT_TRUE(quiet.metrics.count("train_loss_epoch"));
  EXPECT_NEAR(quiet.metrics.at("train_loss_epoch"), want, 1e-12);
  EXPECT_DOUBLE_EQ(quiet.metrics.at("train_loss_step"), eager->losses[8]);
}

TEST(DeferredStep, ALoggerRowReadsTheStepsItWrites) {
  auto every = std::make_shared<Watch>();
  const Fit f = fit_with(every, /*log_every=*/1);
  // each step's row reads its value (the csv has a row per step with train_loss_step)
  for (size_t i = 1; i < every->reads_at_end.size(); ++i)
    EXPECT_GT(every->reads_at_end[i], every->reads_at_end[i - 1]) << "step " << i << " wrote its row unread";
  std::istringstream lines(f.csv);
  std::string line;
  int rows_with_step_loss = 0;
  std::getline(lines, line);
  const auto header = line;
  while (std::getline(lines, line)) rows_with_step_loss += line.find(",,") != 0;
  EXPECT_NE(header.find("train_loss_step"), std::string::npos) << header;
  EXPECT_GE(rows_with_step_loss, 9);
}

// A module whose loss is NaN at one batch, returned deferred: the warning still names it.
struct NanAtBatch : Scripted {
  int64_t bad = 1;
  pl::Scalar training_step(const pl::Batch& b, int64_t i) override {
    const pl::Scalar loss = Scripted::training_step(b, i);
    return i == bad ? loss.map([](double) { return std::numeric_limits<double>::quiet_NaN(); }) : loss;
  }
};

TEST(DeferredStep, ANonFiniteLossIsStillWarnedAboutWithItsEpochAndBatch) {
  FitRun run;
  run.o.max_epochs = 1;
  run.o.max_steps = 2;  // fit ends inside the epoch, right after the bad batch's step
  run.o.enable_checkpointing = false;
  run.o.enable_progress_bar = false;
  std::vector<std::string> lines;
  pl::RuntimeOptions ro = FitRun::runtime();
  ro.log_user = &lines;
  ro.log_callback = [](void* user, PL_LogLevel, const char* line) {
    static_cast<std::vector<std::string>*>(user)->push_back(line);
  };
  pl::Trainer trainer(run.o, ro);
  NanAtBatch m;
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader train(callback_test::dataset(12), lo);
  trainer.fit(m, train);
  int found = 0;
  for (const auto& l : lines) found += l.find("non-finite loss at epoch 0, batch 1") != std::string::npos;
  EXPECT_EQ(found, 1) << "warnings seen: " << lines.size();
}

}  // namespace
