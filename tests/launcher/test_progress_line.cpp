// plrun's progress line (launcher/progress_line.*): rank 0's marked frames kept as the terminal's
// last line, every other line written above it (the bar erased first, redrawn after), finished
// lines kept, the markers the same bytes as the SDK's (sdk/src/progress_bar.hpp).
#include <gtest/gtest.h>

#include <string>

#include "progress_bar.hpp"
#include "progress_line.hpp"

using plrt::launcher::ProgressLine;

namespace {
std::string frame(const std::string& text) {
  return "[rank 0] " + std::string(plrt::launcher::kBarMarker) + text + "\n";
}
std::string done(const std::string& text) {
  return "[rank 0] " + std::string(plrt::launcher::kBarEndMarker) + text + "\n";
}
}  // namespace

TEST(ProgressLine, MarkersAreTheSdks) {
  EXPECT_EQ(plrt::launcher::kBarMarker, std::string_view(plrt::sdk::kBarMarker));
  EXPECT_EQ(plrt::launcher::kBarEndMarker, std::string_view(plrt::sdk::kBarEndMarker));
  EXPECT_EQ(std::string(plrt::launcher::kBarTtyVariable), plrt::sdk::kBarTtyVariable);
}

TEST(ProgressLine, LinesWithoutABarPassAsTheyAre) {
  ProgressLine p;
  std::string out;
  p.feed("[rank 1] a\n[rank 0] b\n", out);
  EXPECT_EQ(out, "[rank 1] a\n[rank 0] b\n");
  EXPECT_FALSE(p.shown());
  out.clear();
  p.close(out);
  EXPECT_EQ(out, "");
}

TEST(ProgressLine, FramesReplaceEachOtherAndOtherLinesGoAbove) {
  ProgressLine p;
  std::string out;
  p.feed(frame("epoch 0  1/4") + frame("epoch 0  2/4"), out);
  EXPECT_EQ(out, "\repoch 0  1/4\x1b[K\repoch 0  2/4\x1b[K");
  EXPECT_TRUE(p.shown());
  out.clear();
  p.feed("[rank 1] x\n[rank 0] y\n", out);  // erased once, the lines, redrawn once
  EXPECT_EQ(out, "\r\x1b[K[rank 1] x\n[rank 0] y\nepoch 0  2/4\x1b[K");
  out.clear();
  p.feed("[rank 1] z\n" + frame("epoch 0  3/4") + "[rank 1] w\n", out);
  EXPECT_EQ(out, "\r\x1b[K[rank 1] z\n\repoch 0  3/4\x1b[K\r\x1b[K[rank 1] w\nepoch 0  3/4\x1b[K");
  out.clear();
  p.feed(done("epoch 0  4/4 done") + "[rank 1] after\n", out);  // the finished line stays
  EXPECT_EQ(out, "\repoch 0  4/4 done\x1b[K\n[rank 1] after\n");
  EXPECT_FALSE(p.shown());
}

TEST(ProgressLine, CloseEndsAShownBar) {
  ProgressLine p;
  std::string out;
  p.feed(frame("epoch 1  1/9"), out);
  out.clear();
  p.close(out);
  EXPECT_EQ(out, "\n");
  EXPECT_FALSE(p.shown());
}
