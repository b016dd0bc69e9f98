// ddp's ABI 1.4 entries: parameter kinds (frozen parameters broadcast at setup only), optimizer_step
// (every trainable parameter whole), and reduce / all_gather / agree_skip on the metrics group,
// alone and across 2 and 3 ranks as threads (the test serving the store).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <plrt/sdk/store.hpp>
#include <thread>

#include "ddp_harness.hpp"
#include "expect_error.hpp"

namespace {

using ddptest::Model;
using ddptest::ParamSpec;
using strattest::error_of;
using ::testing::HasSubstr;

// Trainable, frozen, buffer, trainable (PyTorch's order puts buffers last; kinds may interleave here).
std::vector<ParamSpec> kinded_specs() {
  return {{"fc.weight", PL_F32, 64, true, PL_PARAM_TRAINABLE},
          {"emb.weight", PL_F32, 32, false, PL_PARAM_FROZEN},
          {"bn.running_mean", PL_F32, 8, false, PL_PARAM_BUFFER},
          {"fc.bias", PL_F32, 4, true, PL_PARAM_TRAINABLE}};
}

PL_Tensor f64_view(std::vector<double>& v) { return pl::tensor_view(v.data(), PL_F64, static_cast<int64_t>(v.size())); }

TEST(DdpAbi14, AloneTheCollectivesAreLocalAndTheStepCoversEveryTrainableParameterWhole) {
  pl::Runtime rt(ddptest::runtime_options());
  ddptest::StrategyConfig c;
  c.accelerator = pl::Accelerator(rt, "cpu");
  ddptest::Strategy st(rt, "ddp", c);
  Model m(kinded_specs());
  st.setup(m.params());

  std::vector<double> v{1.5, -2, 3};
  PL_Tensor t = f64_view(v);
  st.reduce(t, PL_REDUCE_SUM);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2, 3}));
  std::vector<double> out(3, 0);
  std::vector<PL_Tensor> outs{f64_view(out)};
  st.all_gather(t, outs);
  EXPECT_EQ(out, v);
  EXPECT_TRUE(st.agree_skip(true));
  EXPECT_FALSE(st.agree_skip(false));

  const auto calls = st.optimizer_step();
  ASSERT_EQ(calls.size(), 1u) << "the host's optimizer is called exactly once per step";
  ASSERT_EQ(calls[0].size(), 2u);
  EXPECT_EQ(calls[0][0].param_index, 0u);
  EXPECT_EQ(calls[0][0].begin, 0);
  EXPECT_EQ(calls[0][0].end, 64);
  EXPECT_EQ(calls[0][1].param_index, 3u);
  EXPECT_EQ(calls[0][1].end, 4);

  EXPECT_EQ(st.stat("frozen_bytes"), 32 * 4);
  EXPECT_EQ(st.stat("buffer_broadcast_bytes"), 8 * 4);
  EXPECT_THAT(error_of([&] { st.on_grad_ready(1); }).what(),
              HasSubstr("'emb.weight' (index 1) has requires_grad 0 (a frozen parameter)"));
  EXPECT_THAT(error_of([&] { st.on_grad_ready(2); }).what(), HasSubstr("(a buffer)"));
  st.teardown();
}

TEST(DdpAbi14, BadArgumentsAreNamed) {
  pl::Runtime rt(ddptest::runtime_options());
  ddptest::StrategyConfig c;
  c.accelerator = pl::Accelerator(rt, "cpu");
  {
    ddptest::Strategy st(rt, "ddp", c);
    Model m({{"w", PL_F32, 4, true, PL_PARAM_BUFFER}});
    EXPECT_THAT(error_of([&] { st.setup(m.params()); }).what(), HasSubstr("kind 3 disagrees with requires_grad 1"));
  }
  {
    ddptest::Strategy st(rt, "ddp", c);
    Model m({{"w", PL_F32, 4, false, 9}});
    EXPECT_THAT(error_of([&] { st.setup(m.params()); }).what(),
                HasSubstr("kind 9 is not valid (PL_PARAM_TRAINABLE 1, PL_PARAM_FROZEN 2, PL_PARAM_BUFFER 3)"));
  }
  ddptest::Strategy st(rt, "ddp", c);
  EXPECT_THAT(error_of([&] { st.optimizer_step(); }).what(), HasSubstr("optimizer_step was called before setup"));
  Model m(kinded_specs());
  st.setup(m.params());
  std::vector<double> v{1};
  PL_Tensor t = f64_view(v);
  EXPECT_THAT(error_of([&] { st.reduce(t, 7); }).what(), HasSubstr("reduce: op 7 is not valid"));
  std::vector<PL_Tensor> two{t, t};
  EXPECT_THAT(error_of([&] { st.all_gather(t, two); }).what(),
              HasSubstr("all_gather: num_outputs is 2 but the world size is 1"));
  std::vector<float> wrong(2);
  std::vector<PL_Tensor> mismatched{pl::tensor_view(wrong.data(), PL_F32, 2)};
  EXPECT_THAT(error_of([&] { st.all_gather(t, mismatched); }).what(),
              HasSubstr("outputs[0] is float32[2] but the input is float64[1]"));
  EXPECT_THAT(error_of([&] { pl::check(rt.host(), st.api()->optimizer_step(st.get(), nullptr)); }).what(),
              HasSubstr("optimizer_step needs a PL_OptimizerFn with `step` set"));
}

// One rank of the multi-rank tests.
void rank_main(int rank, int world, int port, std::atomic<int>& arrived) {
  pl::Runtime rt(ddptest::runtime_options());
  pl::Store store(rt, strattest::store_client(port, "ddp-abi14-test"));
  ddptest::StrategyConfig c;
  c.rank = rank;
  c.world = world;
  c.accelerator = pl::Accelerator(rt, "cpu");
  c.store = store.get();
  c.timeout_ms = 20000;
  c.options = {{"bucket_cap_mb", "0.0001"}, {"first_bucket_cap_mb", "0.0001"}};  // a bucket per parameter
  ddptest::Strategy st(rt, "ddp", c);
  Model m(kinded_specs());
  for (size_t i = 0; i < m.size(); ++i)
    for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_value(i, j, ddptest::init_value(i, j, rank));
  st.setup(m.params());  // every entry takes rank 0's values, the frozen one too
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m.value(i, 1), ddptest::init_value(i, 1, 0)) << m.spec(i).name;

  // A rank changes its frozen parameter and its buffer: the step broadcasts the buffer only.
  m.set_value(1, 0, 1000.0 + rank);
  m.set_value(2, 0, 2000.0 + rank);
  for (int step = 0; step < 2; ++step) {
    st.run_step([&](PL_Device, PL_Parameter*, size_t) {
      for (size_t i : {size_t(0), size_t(3)})
        for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_grad(i, j, ddptest::grad_value(i, j, rank, step));
      // Rank 0 reports every gradient (starting both buckets) before its metric; the others after
      // theirs.  On one group the metric and a bucket would take each other's sequence numbers.
      if (rank == 0) {
        st.on_grad_ready(3);
        st.on_grad_ready(0);
      }
      std::vector<double> mine{static_cast<double>(rank + 1), -static_cast<double>(rank)};
      PL_Tensor t = f64_view(mine);
      st.reduce(t, PL_REDUCE_SUM);
      EXPECT_EQ(mine[0], world * (world + 1) / 2.0);
      EXPECT_EQ(mine[1], -world * (world - 1) / 2.0);
      if (rank != 0) {
        st.on_grad_ready(0);
        st.on_grad_ready(3);
      }
    });
    st.after_backward();
    for (int64_t j = 0; j < m.spec(0).numel; ++j) {
      double mean = 0;
      for (int r = 0; r < world; ++r) mean += ddptest::grad_value(0, j, r, step) / world;
      ASSERT_NEAR(m.grad(0, j), mean, 1e-4) << "rank " << rank << " step " << step << " fc.weight[" << j << "]";
    }
    EXPECT_EQ(m.value(1, 0), 1000.0 + rank) << "a frozen parameter is not broadcast after setup";
    EXPECT_EQ(m.value(2, 0), 2000.0) << "a buffer takes rank 0's value before every step";
  }

  // all_gather with sizes that differ per rank; agree_skip with one rank's inf.
  std::vector<double> in(static_cast<size_t>(rank + 1), rank * 10.0);
  std::vector<std::vector<double>> got(static_cast<size_t>(world));
  std::vector<PL_Tensor> outs;
  for (int r = 0; r < world; ++r) {
    got[r].assign(static_cast<size_t>(r + 1), -1);
    outs.push_back(f64_view(got[r]));
  }
  PL_Tensor tin = f64_view(in);
  st.all_gather(tin, outs);
  for (int r = 0; r < world; ++r) EXPECT_EQ(got[r], std::vector<double>(r + 1, r * 10.0)) << "rank " << r << "'s part";
  EXPECT_TRUE(st.agree_skip(rank == world - 1)) << "one rank's inf makes every rank skip";
  EXPECT_FALSE(st.agree_skip(false));
  ++arrived;
  st.teardown();
}

class DdpAbi14Ranks : public ::testing::TestWithParam<int> {};

TEST_P(DdpAbi14Ranks, MetricsNeverInterleaveWithBucketsAndFrozenParametersStayLocal) {
  const int world = GetParam();
  std::atomic<int> arrived{0};
  const auto failures =
      strattest::run_ranks(world, "ddp-abi14-test", [&](int r, int port) { rank_main(r, world, port, arrived); });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
  EXPECT_EQ(arrived.load(), world);
}

INSTANTIATE_TEST_SUITE_P(World, DdpAbi14Ranks, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
