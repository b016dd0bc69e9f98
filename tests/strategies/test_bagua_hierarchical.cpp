// hierarchical=true|false (docs/bagua.md "hierarchical", plugins/strategies/bagua/hierarchy.hpp) on
// ranks as threads split into nodes of consecutive ranks, against plain-loop references:
//  - gradient_allreduce: the nodes' means (or sums) reduced among the leaders: the job's mean (or
//    sum), equal to the flat run's to 1e-6, every rank bit for bit the same;
//  - async: its rounds and its sync_weights run through a hierarchy of its own;
//  - one node: hierarchical=true changes nothing;
//  - bad inputs: a bad value, nodes of different sizes, shift_one on an odd number of nodes.
// bytegrad, decentralized and low_precision_decentralized have their hierarchical cases beside
// their flat ones (test_bagua_bytegrad.cpp, test_bagua_decentralized.cpp,
// test_bagua_low_precision.cpp).
#include <gmock/gmock.h>

#include <chrono>
#include <thread>

#include "bagua_harness.hpp"

namespace {

using namespace baguatest;
using ::testing::HasSubstr;
using Options = std::vector<std::pair<std::string, std::string>>;

constexpr int kSteps = 12;
constexpr float kLr = 0.1f;

// Every rank's gradient at the common weights, reduced as nodes of per_node ranks (summed in rank
// order, divided when average), then among the nodes; then SGD.
Weights reference(int world, int per_node, bool average) {
  Weights x = initial(0);
  for (int k = 0; k < kSteps; ++k) {
    std::vector<Weights> node;
    for (int r = 0; r < world; r += per_node) {
      Weights s = gradient(x, r, k);
      for (int j = 1; j < per_node; ++j) {
        const Weights g = gradient(x, r + j, k);
        for (int i = 0; i < kParams; ++i) s[i] += g[i];
      }
      if (average)
        for (float& v : s) v /= static_cast<float>(per_node);
      node.push_back(s);
    }
    for (int i = 0; i < kParams; ++i) {
      float s = 0;
      for (const Weights& n : node) s += n[i];
      x[i] -= kLr * (average ? s / static_cast<float>(node.size()) : s);
    }
  }
  return x;
}

TEST(Hierarchical, GradientAllreduceIsTheJobsMeanOrSum) {
  for (bool average : {true, false}) {
    Options opts;
    if (!average) opts.emplace_back("average", "false");
    const TrainResult hier = train_on_nodes("bagua", 4, 2, opts, kSteps, kLr, {"hierarchical", "bytes_per_step"});
    opts.emplace_back("hierarchical", "false");
    const TrainResult flat = train_on_nodes("bagua", 4, 2, opts, kSteps, kLr, {"hierarchical"});
    for (int r = 1; r < 4; ++r) EXPECT_EQ(hier.weights[r], hier.weights[0]) << "rank " << r;
    EXPECT_LE(max_abs_diff(hier.weights[0], reference(4, 2, average)), 1e-6) << "average=" << average;
    EXPECT_LE(max_abs_diff(hier.weights[0], flat.weights[0]), 1e-6) << "average=" << average;
    EXPECT_GT(max_abs_diff(hier.weights[0], initial(0)), 1e-3);
    EXPECT_EQ(hier.stats[0].at("hierarchical"), 1);
    EXPECT_EQ(flat.stats[0].at("hierarchical"), 0);
    EXPECT_EQ(hier.stats[0].at("bytes_per_step"), 4.0 * kParams);  // the leader's allreduce
    EXPECT_EQ(hier.stats[1].at("bytes_per_step"), 0);              // a non-leader's: none between nodes
  }
}

// Three nodes of two: the leaders' group has three ranks.
TEST(Hierarchical, ThreeNodes) {
  const TrainResult got = train_on_nodes("bagua", 6, 3, {}, kSteps, kLr);
  for (int r = 1; r < 6; ++r) EXPECT_EQ(got.weights[r], got.weights[0]) << "rank " << r;
  EXPECT_LE(max_abs_diff(got.weights[0], reference(6, 2, true)), 1e-6);
}

// On one node the option changes nothing (Bagua's hierarchical mode there compresses nothing).
TEST(Hierarchical, OneNodeChangesNothing) {
  const TrainResult on = train("bagua_bytegrad", 2, {{"hierarchical", "true"}}, kSteps, kLr, {"hierarchical"});
  const TrainResult off = train("bagua_bytegrad", 2, {}, kSteps, kLr);
  EXPECT_EQ(on.weights[0], off.weights[0]);
  EXPECT_EQ(on.stats[0].at("hierarchical"), 0);
}

// async: rounds while training and the synchronous average at the end run through the thread's
// own hierarchy; every rank ends with the same weights.
TEST(Hierarchical, AsyncAveragesThroughItsOwnHierarchy) {
  const TrainResult got =
      train_on_nodes("bagua_async", 4, 2, {{"sync_interval_ms", "1"}}, 20, kLr,
                     {"async_rounds", "async_syncs", "hierarchical"}, [](baguatest::Run& run, int k) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(5));  // rounds run meanwhile
                       if (k == 19) pl::check(run.host, run.strategy->api()->sync_weights(run.strategy->get()));
                     });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(got.weights[r], got.weights[0]) << "rank " << r;
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(got.stats[r].at("async_rounds"), 0) << "rank " << r;
    EXPECT_EQ(got.stats[r].at("async_syncs"), 1) << "rank " << r;
    EXPECT_EQ(got.stats[r].at("hierarchical"), 1) << "rank " << r;
  }
}

// ---- bad inputs ----

std::string create_error(int world, int nodes, const Options& options) {
  pl::Runtime rt(strattest::runtime_options());
  ddptest::StrategyConfig c;
  c.world = world;
  c.num_nodes = nodes;
  c.accelerator = pl::Accelerator(rt, "cpu");
  c.options = options;
  try {
    ddptest::Strategy s(rt, "bagua", c);
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  return "";
}

TEST(HierarchicalErrors, BadValue) {
  const std::string m = create_error(1, 1, {{"hierarchical", "maybe"}});
  EXPECT_THAT(m, HasSubstr("hierarchical"));
  EXPECT_THAT(m, HasSubstr("'maybe'"));
  EXPECT_THAT(m, HasSubstr("true"));
}

TEST(HierarchicalErrors, ShiftOneNeedsAnEvenNumberOfNodes) {
  const std::string m = create_error(6, 3, {{"algorithm", "decentralized"}, {"peer_selection_mode", "shift_one"}});
  EXPECT_THAT(m, HasSubstr("shift_one"));
  EXPECT_THAT(m, HasSubstr("3 nodes"));
  EXPECT_THAT(m, HasSubstr("hierarchical=false"));
  // Flat, six processes pair up: no world-size error (the create goes on, to its process group).
  const std::string flat = create_error(
      6, 3, {{"algorithm", "decentralized"}, {"peer_selection_mode", "shift_one"}, {"hierarchical", "false"}});
  EXPECT_THAT(flat, ::testing::Not(HasSubstr("shift_one")));
}

// Two nodes of 2 and 1 processes: every rank's setup fails naming the sizes (a mean of node means
// would weigh the ranks unequally), none hangs.
TEST(HierarchicalErrors, NodesOfDifferentSizes) {
  const auto failures = strattest::run_ranks(3, "bagua-unequal", [&](int rank, int port) {
    pl::Runtime rt(strattest::runtime_options());
    pl::Store store(rt, strattest::store_client(port, "bagua-unequal"));
    ddptest::StrategyConfig c = rank_config(rt, store.get(), rank, 3);
    c.num_nodes = 2;
    c.node_rank = rank < 2 ? 0 : 1;
    c.local_rank = rank < 2 ? rank : 0;
    c.local_world = rank < 2 ? 2 : 1;
    ddptest::Strategy s(rt, "bagua", c);
    Weights x = initial(rank), g(kParams, 0.0f);
    std::vector<PL_Parameter> params = tiny_params(x, g);
    s.setup(params);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(failures[r], HasSubstr("same number of processes on every node")) << "rank " << r;
    EXPECT_THAT(failures[r], HasSubstr("from 1 to 2")) << "rank " << r;
    EXPECT_THAT(failures[r], HasSubstr("hierarchical=false")) << "rank " << r;
  }
}

}  // namespace
