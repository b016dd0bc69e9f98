// The trace profiler at two ranks (issue 31): plrt-mlp --profiler trace under plrun ddp writes one
// Trace Event Format file per rank into rank 0's log folder; each is parsed here: valid JSON,
// complete events ("ph": "X") of that rank, sorted by start, spans nested on each thread, and the
// strategy's gradient synchronisation and the metrics' collectives among them.  A bad profiler
// name exits 2 (test_exit_codes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "training_support.hpp"

namespace {

using namespace plrt_training;
using ::testing::HasSubstr;

TEST(ProfilerRanks, EveryRanksTraceIsNestedOrderedTraceEventJson) {
  TempDir dir;
  auto r = run(plrun("ddp", 2, mlp_args({"--epochs", "2", "--profiler", "trace", "--root-dir", dir.path.string()})),
               {{"PL_LOG_LEVEL", "info"}});
  ASSERT_EQ(r.exit_code, 0) << r.status() << "\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("FIT Profiler Report")) << "rank 0 prints the table";
  const fs::path folder = dir.path / "lightning_logs" / "version_0" / "profiler";
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_TRUE(fs::exists(folder / ("fit-rank" + std::to_string(rank) + ".txt")));
    std::ifstream in(folder / ("rank" + std::to_string(rank) + ".trace.json"));
    ASSERT_TRUE(in) << folder;
    const auto doc = nlohmann::json::parse(in);                       // throws (fails the test) on invalid JSON
    std::map<int, std::vector<std::pair<double, std::string>>> open;  // per thread: (end, name)
    std::map<std::string, int> seen;
    double last = -1;
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("ph") == "M") continue;
      ASSERT_EQ(e.at("ph"), "X") << e.dump();
      EXPECT_EQ(e.at("pid"), rank) << e.dump();
      const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
      const std::string name = e.at("name").get<std::string>();
      EXPECT_GE(ts, last) << "not sorted by start: " << e.dump();
      EXPECT_GE(dur, 0.0) << e.dump();
      last = ts;
      auto& stack = open[e.at("tid").get<int>()];
      while (!stack.empty() && stack.back().first <= ts + 0.002) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(ts + dur, stack.back().first + 0.002) << name << " overlaps " << stack.back().second;
      } else {
        EXPECT_TRUE(name == "fit" || open.size() > 1) << name << " outside fit on the main thread";
      }
      stack.emplace_back(ts + dur, name);
      ++seen[name];
    }
    EXPECT_EQ(seen["fit"], 1);
    EXPECT_EQ(seen["run_training_epoch"], 2);
    EXPECT_GT(seen["run_training_batch"], 0);
    EXPECT_EQ(seen["[Strategy]ddp.after_backward"], seen["run_training_batch"]) << "the gradient sync every batch";
    EXPECT_EQ(seen["optimizer_step"], seen["run_training_batch"]);
    int collectives = 0;
    for (const auto& [name, n] : seen)
      if (name.rfind("collective.", 0) == 0 || name == "[Strategy]ddp.reduce" || name == "[Strategy]ddp.all_gather")
        collectives += n;
    EXPECT_GT(collectives, 0) << "the metrics' collectives (sync_dist, epoch values)";
  }
}

}  // namespace
