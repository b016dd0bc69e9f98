// ddp2 across processes, Gloo's way: one thread per rank ("node") in this process, the test serving
// the rendezvous store; every rank has its own runtime, store client, cpu accelerator and ddp2
// instance with 2 cpu replicas.  Checks rank 0's start-up broadcast, the average over ranks of each
// rank's replica sum, and no_sync.  Every wait is bounded (group timeouts of 20 s), and a rank that
// throws records the failure instead of leaving the test hanging.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/store.hpp>
#include <thread>

#include "dp_harness.hpp"

using dptest::Model;
using dptest::Replicas;
using ::testing::HasSubstr;

namespace {

constexpr int kReplicas = 2;

pl::RuntimeOptions quiet_runtime() {
  auto o = ddptest::runtime_options();
  o.log_level = "off";  // the test checks the errors itself
  return o;
}

// What rank `rank`'s root gradient must be after a synced step: the mean over ranks of each rank's
// replica sum, sum_r (r + 1) = 3 for two replicas.
double synced_grad(size_t i, int64_t j, int world, int step) {
  double total = 0;
  for (int k = 0; k < world; ++k)
    for (int r = 0; r < kReplicas; ++r) total += dptest::replica_grad(i, j, k, r, step);
  return total / world;
}

double local_grad(size_t i, int64_t j, int rank, int step) {
  double total = 0;
  for (int r = 0; r < kReplicas; ++r) total += dptest::replica_grad(i, j, rank, r, step);
  return total;
}

// The first element of every entry that differs from `want(i, j)`, as a message ("" if none).
template <class Want, class Got>
std::string first_difference(const Model& m, bool grads_only, Want&& want, Got&& got) {
  for (size_t i = 0; i < m.size(); ++i) {
    if (grads_only && !m.spec(i).requires_grad) continue;
    for (int64_t j = 0; j < m.spec(i).numel; ++j)
      if (got(i, j) != want(i, j))
        return m.spec(i).name + "[" + std::to_string(j) + "] = " + std::to_string(got(i, j)) + ", expected " +
               std::to_string(want(i, j));
  }
  return "";
}

void rank_main(int rank, int world, int port) {
  pl::Runtime rt(quiet_runtime());
  pl::Store store(rt, strattest::store_client(port, "dp-ddp2-test"));
  dptest::Config c;
  c.rank = rank;
  c.world = world;
  c.accelerator = pl::Accelerator(rt, "cpu");
  c.device_ids = {0, 1};
  c.store = store.get();
  c.timeout_ms = 20000;
  c.options = {{"bucket_cap_mb", "0.001"}};  // several buckets per dtype
  dptest::Strategy st(rt, "ddp2", c);
  ASSERT_EQ(st.num_replicas(), kReplicas);
  const auto pg = st.process_group();
  EXPECT_NE(pg.first, nullptr);
  EXPECT_NE(pg.second, nullptr);

  Replicas reps(kReplicas);
  for (int r = 0; r < kReplicas; ++r)
    for (size_t i = 0; i < reps[r].size(); ++i)
      for (int64_t j = 0; j < reps[r].spec(i).numel; ++j)
        reps[r].set_value(i, j, ddptest::init_value(i, j, rank + 10 * r));
  reps.register_with(st);
  // Setup broadcast rank 0's values (parameters and the buffer) into every rank's root.
  EXPECT_EQ(first_difference(
                reps[0], false, [](size_t i, int64_t j) { return ddptest::init_value(i, j, 0); },
                [&](size_t i, int64_t j) { return reps[0].value(i, j); }),
            "")
      << "rank " << rank << ": root after setup";

  for (int step = 0; step < 4; ++step) {
    const bool sync = step != 2;  // step 2 accumulates locally (no_sync)
    st.set_grad_sync(sync);
    st.run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
      if (step == 0) {  // the replicas start from the root's values, which are rank 0's
        EXPECT_EQ(first_difference(
                      reps[r], false, [](size_t i, int64_t j) { return ddptest::init_value(i, j, 0); },
                      [&](size_t i, int64_t j) { return reps[r].value(i, j); }),
                  "")
            << "rank " << rank << " replica " << r;
      }
      dptest::write_grads(reps[r], rank, r, step);
    });
    st.after_backward();
    const std::string diff = first_difference(
        reps[0], true,
        [&](size_t i, int64_t j) { return sync ? synced_grad(i, j, world, step) : local_grad(i, j, rank, step); },
        [&](size_t i, int64_t j) { return reps[0].grad(i, j); });
    EXPECT_EQ(diff, "") << "rank " << rank << " step " << step << (sync ? " (synced)" : " (no_sync)");
    st.after_optimizer_step();
  }
  EXPECT_EQ(st.stat("steps"), 4);
  EXPECT_GT(st.stat("allreduce_ms"), 0);
  st.teardown();
}

class Ddp2 : public ::testing::TestWithParam<int> {};

TEST_P(Ddp2, RootGradsAreTheMeanOverRanksOfEachRanksReplicaSum) {
  const int world = GetParam();
  const auto failures =
      strattest::run_ranks(world, "dp-ddp2-test", [&](int r, int port) { rank_main(r, world, port); });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, Ddp2, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
