// pl::ModelSummary: Lightning's table (its format and its human-readable counts, from
// lightning.pytorch.utilities.model_summary), the Trainer's default one at fit's start on rank 0,
// enable_model_summary=false, and the contradiction of both.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/model_summary.hpp>
#include <plrt/sdk/nn.hpp>

#include "callback_test_support.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Gate : pl::Module {};  // no parameters of its own

struct Block : pl::Module {
  pl::nn::Linear fc{256, 128};
  Gate gate;
  Block() {
    register_module("fc", fc);
    register_module("gate", gate);
  }
};

struct Net : pl::Module {
  pl::nn::Linear fc1{784, 256};
  Block block;
  pl::nn::Linear head{128, 10};
  Net() {
    register_module("fc1", fc1);
    register_module("block", block);
    register_module("head", head);
    head.requires_grad_(false);
  }
};

// Lightning's get_human_readable_count on the same numbers.
TEST(ModelSummary, CountsReadAsLightningWritesThem) {
  const std::vector<std::pair<int64_t, std::string>> cases = {{0, "0 "},
                                                              {123, "123 "},
                                                              {999, "999 "},
                                                              {1000, "1.0 K"},
                                                              {1234, "1.2 K"},
                                                              {200960, "200 K"},
                                                              {2000000, "2.0 M"},
                                                              {3000000000, "3.0 B"},
                                                              {400000000000000, "400 T"},
                                                              {5000000000000000, "5,000 T"}};
  for (const auto& [n, text] : cases) EXPECT_EQ(pl::ModelSummary::readable_count(n), text) << n;
}

TEST(ModelSummary, TableAtEachDepth) {
  Net net;
  // fc1 784*256+256 = 200,960; block.fc 256*128+128 = 32,896; head 128*10+10 = 1,290 (frozen)
  EXPECT_EQ(pl::ModelSummary::table(net),
            "  | Name  | Type   | Params\n"
            "---------------------------------\n"
            "0 | fc1   | Linear | 200 K \n"
            "1 | block | Block  | 32.9 K\n"
            "2 | head  | Linear | 1.3 K \n"
            "---------------------------------\n"
            "233 K     Trainable params\n"
            "1.3 K     Non-trainable params\n"
            "235 K     Total params\n"
            "0.941     Total estimated model params size (MB)");
  const std::string deep = pl::ModelSummary::table(net, -1);
  EXPECT_THAT(deep, HasSubstr("2 | block.fc   | Linear | 32.9 K"));
  EXPECT_THAT(deep, HasSubstr("3 | block.gate | Gate   | 0     "));
  EXPECT_EQ(deep, pl::ModelSummary::table(net, 2));
  EXPECT_EQ(pl::ModelSummary::table(net, 0).rfind("  | Name | Type | Params\n", 0), 0u);
  EXPECT_THROW(pl::ModelSummary(-2), pl::Error);
}

struct Captured {
  std::vector<std::string> lines;
  static void take(void* user, PL_LogLevel, const char* line) { static_cast<Captured*>(user)->lines.push_back(line); }
  int count(const std::string& what) const {
    int n = 0;
    for (const auto& l : lines) n += l.find(what) != std::string::npos;
    return n;
  }
};

int64_t fit_with(callback_test::FitRun& run, Captured& logs) {
  pl::RuntimeOptions ro = callback_test::FitRun::runtime();
  ro.log_level = "info";
  ro.log_callback = Captured::take;
  ro.log_user = &logs;
  pl::Trainer trainer(run.o, ro);
  callback_test::Scripted m;
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  pl::DataLoader train(callback_test::dataset(12), lo);
  trainer.fit(m, train);
  return trainer.current_epoch();
}

TEST(ModelSummary, TheTrainerLogsItOnceAtFitStartUnlessDisabled) {
  {
    callback_test::FitRun run;
    run.o.max_epochs = 2;
    Captured logs;
    fit_with(run, logs);
    EXPECT_EQ(logs.count("Total estimated model params size (MB)"), 1) << ::testing::PrintToString(logs.lines);
  }
  {
    callback_test::FitRun run;
    run.o.max_epochs = 1;
    run.o.enable_model_summary = false;
    Captured logs;
    fit_with(run, logs);
    EXPECT_EQ(logs.count("Total params"), 0);
  }
  {
    callback_test::FitRun run;
    run.o.enable_model_summary = false;
    run.o.callbacks = {std::make_shared<pl::ModelSummary>(2)};
    Captured logs;
    try {
      fit_with(run, logs);
      FAIL() << "enable_model_summary=false beside a ModelSummary was accepted";
    } catch (const pl::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("enable_model_summary=false"));
    }
  }
}

}  // namespace
