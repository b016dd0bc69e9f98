// The progress bar's frames (sdk/src/progress_bar.*): the text of one frame fitted to the width,
// the rate and the ETA, the values; the redraw limit (an injected clock), a stage nested in another
// (validation inside an epoch), and where it goes (PL_PROGRESS_BAR_TTY, checked).  The bar on a
// real terminal, and under plrun, is tests/training/test_progress_tty.cpp's.
#include <gtest/gtest.h>

#include <plrt/sdk/error.hpp>
#include <string>
#include <vector>

#include "progress_bar.hpp"
#include "unit_support.hpp"

using plrt::sdk::BarFrame;
using plrt::sdk::ProgressBar;
using plrt::sdk::render_bar;

namespace {

BarFrame frame(int64_t done, int64_t total, double elapsed) {
  BarFrame f;
  f.stage = "train";
  f.epoch = 3;
  f.last_epoch = 9;
  f.done = done;
  f.total = total;
  f.elapsed_s = elapsed;
  return f;
}

}  // namespace

TEST(ProgressBarRender, ShowsEpochStepsBarRateEtaAndValues) {
  BarFrame f = frame(12, 50, 2.0);  // 6 it/s, 38 left: ETA 6.33 s
  f.values = {{"train_loss_step", 0.41}, {"val_acc", 0.93}};
  const std::string line = render_bar(f, 120);
  EXPECT_EQ(line.rfind("epoch 3/9  12/50 [", 0), 0u) << line;
  EXPECT_NE(line.find("] 24%  6.0 it/s  ETA 0:06  train_loss_step=0.41 val_acc=0.93"), std::string::npos) << line;
  // the bar: 40 wide at most, 24% of it '=' then '>'
  const size_t open = line.find('['), close = line.find(']');
  ASSERT_NE(close, std::string::npos);
  const std::string bar = line.substr(open + 1, close - open - 1);
  EXPECT_EQ(bar.size(), 40u);
  EXPECT_EQ(bar.substr(0, 10), std::string(9, '=') + ">") << bar;
  EXPECT_EQ(bar.find_first_not_of(' ', 10), std::string::npos) << bar;
}

TEST(ProgressBarRender, FitsTheWidth) {
  BarFrame f = frame(5, 10, 1.0);
  f.values = {{"loss", 0.5}};
  for (int cols : {200, 80, 60, 50, 30, 10, 1}) {
    const std::string line = render_bar(f, cols);
    EXPECT_LE(static_cast<int>(line.size()), std::max(cols - 1, 0)) << cols << ": " << line;
  }
  // the values' tail is cut before the bar shrinks below 10
  f.values = {{"loss", 0.5}, {"val_acc", 0.75}, {"val_loss", 1.25}};
  const std::string cut = render_bar(f, 70);
  EXPECT_NE(cut.find("[=====>    ]"), std::string::npos) << cut;
  EXPECT_NE(cut.find("loss=0.5"), std::string::npos) << cut;
  EXPECT_EQ(cut.find("val_loss"), std::string::npos) << cut;
  // too narrow for the text and a bar of 10: no bar
  const std::string narrow = render_bar(f, 50);
  EXPECT_EQ(narrow.find('['), std::string::npos) << narrow;
  EXPECT_EQ(narrow.rfind("epoch 3/9  5/10 50%", 0), 0u) << narrow;
}

TEST(ProgressBarRender, EtaRateFinishedAndOtherStages) {
  BarFrame f = frame(10, 36010, 1.0);  // 10 it/s, 36000 left: one hour
  EXPECT_NE(render_bar(f, 200).find("10.0 it/s  ETA 1:00:00"), std::string::npos) << render_bar(f, 200);
  f = frame(0, 10, 0.0);  // nothing done yet: no rate, no ETA
  EXPECT_NE(render_bar(f, 200).find("0%  ? it/s  ETA ?"), std::string::npos) << render_bar(f, 200);
  f = frame(10, 10, 75.0);  // finished: the elapsed time instead of the ETA
  f.finished = true;
  const std::string done = render_bar(f, 200);
  EXPECT_NE(done.find("[========================================] 100%  0.1 it/s  1:15"), std::string::npos) << done;
  EXPECT_EQ(done.find("ETA"), std::string::npos);
  // a resumed epoch: the batches done before this run are not in the rate
  f = frame(30, 50, 2.0);
  f.done_at_start = 20;
  EXPECT_NE(render_bar(f, 200).find("5.0 it/s  ETA 0:04"), std::string::npos) << render_bar(f, 200);
  f.stage = "validate";
  EXPECT_EQ(render_bar(f, 200).rfind("validate  30/50 [", 0), 0u);
  f = frame(1, 2, 1);
  f.last_epoch = -1;  // no max_epochs
  EXPECT_EQ(render_bar(f, 200).rfind("epoch 3  1/2 [", 0), 0u);
}

struct Recorded {
  std::string text;
  bool final;
};

TEST(ProgressBar, RedrawsAtMostEvery100MsAndAtTheEnd) {
  double now = 0;
  std::vector<Recorded> out;
  ProgressBar bar(
      {ProgressBar::Mode::terminal, 200},
      [&](const std::string& t, bool f) {
        out.push_back({t, f});
      },
      [&] { return now; });
  bar.start("train", 0, 1, 1000);
  ASSERT_EQ(out.size(), 1u);  // drawn at once
  for (int i = 1; i <= 1000; ++i) {
    now += 0.001;  // 1000 it/s for one second
    bar.update(i, {{"loss", 1.0 / i}});
  }
  // one second: at most 10 redraws (plus the first frame)
  EXPECT_GE(out.size(), 9u);
  EXPECT_LE(out.size(), 11u);
  for (const auto& r : out) EXPECT_FALSE(r.final);
  bar.finish({{"loss", 0.25}});
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.back().final);
  EXPECT_NE(out.back().text.find("1000/1000"), std::string::npos) << out.back().text;
  EXPECT_NE(out.back().text.find("loss=0.25"), std::string::npos) << out.back().text;
  EXPECT_FALSE(bar.open());
  const size_t n = out.size();
  bar.update(5, {});  // no stage: nothing
  bar.finish({});
  EXPECT_EQ(out.size(), n);
}

TEST(ProgressBar, DueSaysWhenAFrameWouldBeDrawnAndAdvanceKeepsCount) {
  double now = 0;
  std::vector<Recorded> out;
  ProgressBar bar(
      {ProgressBar::Mode::terminal, 200},
      [&](const std::string& t, bool f) {
        out.push_back({t, f});
      },
      [&] { return now; });
  EXPECT_FALSE(bar.due()) << "no stage";
  bar.start("train", 0, 1, 10);
  EXPECT_FALSE(bar.due()) << "just drawn";
  now = 0.05;
  bar.advance(3);
  EXPECT_FALSE(bar.due());
  EXPECT_EQ(out.size(), 1u) << "advance never draws";
  now = 0.2;
  EXPECT_TRUE(bar.due());
  bar.finish({});
  EXPECT_NE(out.back().text.find("3/10"), std::string::npos) << out.back().text;
}

TEST(ProgressBar, NestedStageReturnsToTheOuterLine) {
  double now = 0;
  std::vector<Recorded> out;
  ProgressBar bar(
      {ProgressBar::Mode::terminal, 200},
      [&](const std::string& t, bool f) {
        out.push_back({t, f});
      },
      [&] { return now; });
  bar.start("train", 2, 4, 10);
  now = 1;
  bar.update(10, {});
  bar.start("validate", 2, 4, 5);  // validation inside the epoch
  EXPECT_EQ(out.back().text.rfind("validate  0/5", 0), 0u) << out.back().text;
  now = 2;
  bar.update(5, {});
  bar.finish({{"val_acc", 0.9}});  // transient: the epoch's line comes back, not finished
  EXPECT_FALSE(out.back().final);
  EXPECT_EQ(out.back().text.rfind("epoch 2/4  10/10", 0), 0u) << out.back().text;
  bar.finish({{"val_acc", 0.9}});
  EXPECT_TRUE(out.back().final);
  EXPECT_NE(out.back().text.find("val_acc=0.9"), std::string::npos);
  for (size_t i = 0; i + 1 < out.size(); ++i) EXPECT_FALSE(out[i].final) << i;
  // close() finishes a stage left open (fit stopped inside an epoch); nothing when none is
  bar.start("train", 3, 4, 10);
  bar.close();
  EXPECT_TRUE(out.back().final);
  const size_t n = out.size();
  bar.close();
  EXPECT_EQ(out.size(), n);
}

TEST(ProgressBar, OffDrawsNothing) {
  int calls = 0;
  ProgressBar bar({ProgressBar::Mode::off, 80}, [&](const std::string&, bool) { ++calls; });
  bar.start("train", 0, 0, 3);
  bar.update(1, {});
  bar.finish({});
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(bar.active());
}

TEST(ProgressBar, DetectReadsPlrunsTerminalAndRefusesABadOne) {
  {
    plrt_test::ScopedEnv tty(plrt::sdk::kBarTtyVariable, "132");
    auto s = ProgressBar::detect(true);
    EXPECT_EQ(s.mode, ProgressBar::Mode::marker);
    EXPECT_EQ(s.columns, 132);
    EXPECT_EQ(ProgressBar::detect(false).mode, ProgressBar::Mode::off);
  }
  for (const char* bad : {"abc", "0", "-3", "12x"}) {
    plrt_test::ScopedEnv tty(plrt::sdk::kBarTtyVariable, bad);
    try {
      ProgressBar::detect(true);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const pl::Error& e) {
      EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find(std::string("PL_PROGRESS_BAR_TTY='") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  plrt_test::ScopedEnv none(plrt::sdk::kBarTtyVariable, std::nullopt);
  EXPECT_EQ(ProgressBar::detect(false).mode, ProgressBar::Mode::off);
}
