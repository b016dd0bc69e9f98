// plrt_reducer with a communication of several collectives per bucket: reduce_scatter (sum) of the
// bucket's slices, a local scale by 1/world on this rank's slice, then allgather of the slices, as
// a sharded or compressed strategy chains them.  Ranks report their gradients in different orders;
// the result must be every gradient's mean over the ranks (an independent reference computed here),
// each bucket must have run both stages, and the process group's order check must never fire.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <plrt/sdk/store.hpp>
#include <random>
#include <thread>

#include "ddp_harness.hpp"
#include "reducer.hpp"

namespace {

using plrt::reducer::Bucket;
using plrt::reducer::BucketComm;
using plrt::reducer::BucketState;
using plrt::reducer::Reducer;

// Rank r's slice of a bucket of n elements: [begin, begin + count).
std::pair<int64_t, int64_t> slice_of(int64_t n, int world, int r) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = r * base + std::min<int64_t>(r, extra);
  return {begin, base + (r < extra ? 1 : 0)};
}

PL_Tensor sub_view(const PL_Tensor& flat, int64_t begin, int64_t count) {
  PL_Tensor t = flat;
  t.data = static_cast<uint8_t*>(flat.data) + begin * static_cast<int64_t>(pl_dtype_size(flat.dtype));
  t.numel = count;
  t.shape[0] = count;
  return t;
}

class ScatterScaleGather final : public BucketComm {
 public:
  ScatterScaleGather(int rank, int world) : rank_(rank), world_(world) {}
  std::string name() const override { return "reduce_scatter + allgather"; }

  struct State : BucketState {
    std::vector<PL_Tensor> slices;  // of the flat buffer, one per rank (borrowed by the collectives)
    plrt::strategy::DeviceMemory mine;
    PL_Tensor mine_view{};
    int stages_done = 0;
  };

  void prepare(Reducer& r, Bucket& b) override {
    auto st = std::make_unique<State>();
    for (int k = 0; k < world_; ++k) {
      const auto [begin, count] = slice_of(b.flat.numel, world_, k);
      st->slices.push_back(sub_view(b.flat, begin, count));
    }
    const PL_Tensor& own = st->slices[static_cast<size_t>(rank_)];
    st->mine =
        plrt::strategy::DeviceMemory(r.device(), std::max<size_t>(1, own.numel * pl_dtype_size(own.dtype)), "scratch");
    st->mine_view = own;
    st->mine_view.data = st->mine.get();
    b.state = std::move(st);
  }
  PL_Work* start(Reducer& r, Bucket& b) override {
    auto& st = static_cast<State&>(*b.state);
    PL_Work* w = nullptr;
    plrt::strategy::check(r.device().host,
                          r.group().api()->reduce_scatter(r.group().get(), st.slices.data(), st.slices.size(),
                                                          &st.mine_view, PL_REDUCE_SUM, &w),
                          "reduce_scatter");
    return w;
  }
  PL_Work* next(Reducer& r, Bucket& b) override {
    auto& st = static_cast<State&>(*b.state);
    ++st.stages_done;
    if (b.stage == 2) return nullptr;  // the allgather completed
    const auto* a = r.device().api;
    plrt::strategy::check(r.device().host, a->scale(r.device().acc, &st.mine_view, 1.0 / world_, nullptr), "scale");
    PL_Work* w = nullptr;
    plrt::strategy::check(
        r.device().host,
        r.group().api()->allgather(r.group().get(), &st.mine_view, st.slices.data(), st.slices.size(), &w),
        "allgather");
    return w;
  }

  int rank_, world_;
};

void rank_main(int rank, int world, int port) {
  pl::Runtime rt(ddptest::runtime_options());
  pl::Store store(rt, strattest::store_client(port, "reducer-test"));
  pl::Accelerator acc(rt, "cpu");
  const PL_Host* host = rt.host();
  plrt::strategy::DeviceContext dev{host, "reducer-test", acc.api(), acc.get(), {PL_DEVICE_CPU, 0}};
  plrt::strategy::GroupSpec spec;
  spec.who = "reducer-test";
  spec.backend = "gloo";
  spec.name = "reducer-test";
  spec.rank = rank;
  spec.world = world;
  spec.store = store.get();
  spec.timeout_ms = 20000;
  spec.needs = {"reduce_scatter", "allgather"};
  plrt::strategy::Group group(host, spec);
  ScatterScaleGather comm(rank, world);
  ddptest::Model m(ddptest::standard_specs());
  std::vector<std::string> names;
  for (size_t i = 0; i < m.size(); ++i) names.push_back(m.spec(i).name);
  {
    Reducer red("reducer-test", dev, group, comm);
    red.setup(m.params().data(), m.size(), names, 1048, 1048);  // 0.001 MiB: five buckets
    ASSERT_EQ(red.num_buckets(), static_cast<size_t>(ddptest::kSmallCapBuckets));
    std::mt19937 rng(1234 + rank);
    for (int step = 0; step < 3; ++step) {
      std::vector<size_t> order;
      for (size_t i = 0; i < m.size(); ++i) {
        if (!m.spec(i).requires_grad) continue;
        order.push_back(i);
        for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_grad(i, j, ddptest::grad_value(i, j, rank, step));
      }
      std::shuffle(order.begin(), order.end(), rng);           // every rank its own order
      order.resize(order.size() - static_cast<size_t>(step));  // and some never reported (finish starts them)
      for (size_t i : order) red.on_grad_ready(i);
      red.finish_step();
      for (size_t i = 0; i < m.size(); ++i) {
        if (!m.spec(i).requires_grad) continue;
        for (int64_t j = 0; j < m.spec(i).numel; ++j) {
          double mean = 0;
          for (int r = 0; r < world; ++r) mean += ddptest::grad_value(i, j, r, step);
          mean /= world;
          ASSERT_NEAR(m.grad(i, j), mean, 1e-5 * std::max(1.0, std::abs(mean)))
              << "rank " << rank << " step " << step << " " << m.spec(i).name << "[" << j << "]";
        }
      }
    }
    EXPECT_EQ(red.stats().steps, 3u);
    EXPECT_EQ(red.teardown(1000), "");
  }
  // Both stages ran for every bucket in every step: the values above show it, since a
  // reduce_scatter alone (no allgather) or a missing scale gives other numbers.
}

class ReducerStages : public ::testing::TestWithParam<int> {};

TEST_P(ReducerStages, ScatterScaleGatherEqualsTheMeanWhateverTheReadyOrder) {
  const int world = GetParam();
  const auto failures =
      strattest::run_ranks(world, "reducer-test", [&](int r, int port) { rank_main(r, world, port); });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(World, ReducerStages, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
