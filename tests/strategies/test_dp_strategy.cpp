// The dp plugin (and ddp2 in a world of one) in one process, through the C table with the cpu
// accelerator and n = 1..4 cpu "devices": the replicas' gradient sum, their concurrency, the
// copy of the root's values only when dirty, errors from a replica, every setup_replica mismatch,
// the config and option errors, get_stat.  ddp2 across processes: test_dp_ddp2.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <set>
#include <thread>

#include "dp_harness.hpp"

using dptest::error_of;
using dptest::Model;
using dptest::Replicas;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

namespace {

class DpStrategy : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_ = std::make_unique<pl::Runtime>(ddptest::runtime_options());
    cpu_ = pl::Accelerator(*rt_, "cpu");
  }
  dptest::Config config(int n) const {
    dptest::Config c;
    c.accelerator = cpu_;
    c.device_ids.clear();
    for (int r = 0; r < n; ++r) c.device_ids.push_back(r);
    return c;
  }
  std::unique_ptr<dptest::Strategy> make(int n, const std::string& name = "dp") {
    return std::make_unique<dptest::Strategy>(*rt_, name, config(n));
  }
  pl::Error create_error(const dptest::Config& c, const std::string& name = "dp") {
    return error_of([&] { dptest::Strategy s(*rt_, name, c); });
  }

  std::unique_ptr<pl::Runtime> rt_;
  pl::Accelerator cpu_;
};

// Sets every value of the model to init_value(., ., tag).
void init_values(Model& m, int tag) {
  for (size_t i = 0; i < m.size(); ++i)
    for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_value(i, j, ddptest::init_value(i, j, tag));
}

TEST_F(DpStrategy, LaunchInfoAndDescriptors) {
  for (const char* name : {"dp", "ddp2"}) {
    auto ref = rt_->find(PL_PLUGIN_STRATEGY, name);
    EXPECT_EQ(ref.name(), name);
    const auto* api = ref.api<PL_StrategyApi>();
    EXPECT_EQ(api->struct_size, sizeof(PL_StrategyApi));
    EXPECT_NE(api->num_replicas, nullptr);
    EXPECT_NE(api->setup_replica, nullptr);
    EXPECT_NE(api->get_stat, nullptr);
    EXPECT_NE(api->after_optimizer_step, nullptr);
    PL_LaunchInfo li{};
    li.struct_size = sizeof li;
    PL_OptionList none{sizeof(PL_OptionList), nullptr, 0};
    ASSERT_EQ(api->launch_info(&none, &li), nullptr);
    EXPECT_EQ(li.mode, PL_LAUNCH_SINGLE_PROCESS) << name;
    EXPECT_EQ(li.needs_process_group, std::string(name) == "ddp2" ? 1 : 0) << name;
    EXPECT_EQ(li.max_devices_per_process, 0) << name;
  }
}

// Root grads = the sum of what every replica's fn wrote; each fn gets its own replica's table,
// its index, the count and its device.
TEST_F(DpStrategy, RootGradsAreTheSumOfTheReplicas) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto st = make(n);
    EXPECT_EQ(st->num_replicas(), n);
    Replicas reps(n);
    reps.register_with(*st);
    for (int step = 0; step < 3; ++step) {
      std::atomic<int> calls{0};
      st->run_step([&](int r, int nr, PL_Device d, PL_Parameter* p, size_t np) {
        ++calls;
        EXPECT_EQ(nr, n);
        EXPECT_EQ(d.type, PL_DEVICE_CPU);
        EXPECT_EQ(d.index, r);  // device_ids[r]
        ASSERT_TRUE(r >= 0 && r < n);
        // replica 0: setup's own array; the others: the strategy's copy of what setup_replica was
        // given (that array is borrowed for the call only), pointing at the same memory
        if (r == 0) {
          EXPECT_EQ(p, reps[r].params().data());
        }
        EXPECT_EQ(np, reps[r].size());
        for (size_t i = 0; i < np && i < reps[r].size(); ++i) {
          EXPECT_EQ(p[i].value.data, reps[r].params()[i].value.data);
          EXPECT_EQ(p[i].grad.data, reps[r].params()[i].grad.data);
        }
        dptest::write_grads(reps[r], 0, r, step);
      });
      EXPECT_EQ(calls.load(), n);
      st->after_backward();
      const double replica_sum = n * (n + 1) / 2.0;  // sum of (r + 1)
      for (size_t i = 0; i < reps[0].size(); ++i) {
        if (!reps[0].spec(i).requires_grad) continue;
        for (int64_t j = 0; j < reps[0].spec(i).numel; ++j)
          ASSERT_EQ(reps[0].grad(i, j), ddptest::grad_value(i, j, 0, step) * replica_sum)
              << reps[0].spec(i).name << "[" << j << "] step " << step;
      }
      st->after_optimizer_step();
    }
    EXPECT_EQ(st->stat("steps"), 3);
    EXPECT_EQ(st->stat("replicas"), n);
  }
}

// A barrier inside fn that passes only when all n replicas are inside at once: a sequential
// implementation times out here (and fails) instead of hanging.  Replica 0 runs on the caller's
// thread, the others on persistent threads of their own.
TEST_F(DpStrategy, ReplicasRunConcurrentlyOnPersistentThreads) {
  for (int n = 2; n <= 4; ++n) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto st = make(n);
    Replicas reps(n);
    reps.register_with(*st);
    std::vector<std::thread::id> first_ids(n);
    for (int step = 0; step < 3; ++step) {
      std::mutex m;
      std::condition_variable cv;
      int inside = 0;
      std::vector<std::thread::id> ids(n);
      st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
        ids[r] = std::this_thread::get_id();
        std::unique_lock<std::mutex> lock(m);
        ++inside;
        cv.notify_all();
        if (!cv.wait_for(lock, 5s, [&] { return inside == n; }))
          throw std::runtime_error("replica " + std::to_string(r) + " waited 5 s at the barrier: only " +
                                   std::to_string(inside) + " of " + std::to_string(n) + " replicas were inside");
      });
      EXPECT_EQ(ids[0], std::this_thread::get_id());
      EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), static_cast<size_t>(n));
      if (step == 0) first_ids = ids;
      EXPECT_EQ(ids, first_ids) << "the worker threads are created once";
      st->after_backward();
    }
  }
}

// The root's values reach the replicas after setup and after after_optimizer_step only; buffers
// (requires_grad 0) too; what a replica writes into its own copy does not survive the next copy.
TEST_F(DpStrategy, RootValuesAreCopiedOnlyWhenDirty) {
  const int n = 3;
  auto st = make(n);
  Replicas reps(n);
  init_values(reps[0], 0);
  for (int r = 1; r < n; ++r) init_values(reps[r], 50 + r);  // distinct garbage
  reps.register_with(*st);
  auto expect_replicas_hold = [&](int tag, const char* when) {
    st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
      Model& m = reps[r];
      for (size_t i = 0; i < m.size(); ++i)
        for (int64_t j = 0; j < m.spec(i).numel; ++j)
          if (m.value(i, j) != ddptest::init_value(i, j, tag)) {
            ADD_FAILURE() << when << ": replica " << r << " " << m.spec(i).name << "[" << j << "] = " << m.value(i, j)
                          << ", expected " << ddptest::init_value(i, j, tag);
            return;
          }
      if (r > 0) m.set_value(2, 0, -1.0);  // a replica's own write (bn.running_mean): not kept
    });
    st->after_backward();
  };
  expect_replicas_hold(0, "after setup");
  init_values(reps[0], 9);  // the root changes (both parameters and the buffer) ...
  st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
    if (r == 0) return;
    EXPECT_EQ(reps[r].value(0, 1), ddptest::init_value(0, 1, 0)) << "copied although not dirty";
    EXPECT_EQ(reps[r].value(2, 0), -1.0) << "buffer copied although not dirty";
  });
  st->after_backward();
  st->after_optimizer_step();  // ... and only now is the copy due
  expect_replicas_hold(9, "after after_optimizer_step");
  EXPECT_GE(st->stat("broadcast_ms"), 0);
}

// fn fails in replica 2: its error, prefixed, comes back; the other replicas ran to the end before
// run_step returned; the lowest failing replica wins; the threads stay usable.
TEST_F(DpStrategy, ReplicaErrorIsPrefixedAndTheOthersAreJoined) {
  const int n = 4;
  auto st = make(n);
  Replicas reps(n);
  reps.register_with(*st);
  std::vector<std::atomic<bool>> finished(n);
  for (auto& f : finished) f = false;
  const auto e = error_of([&] {
    st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
      if (r == 2) throw std::runtime_error("boom in two");
      std::this_thread::sleep_for(100ms);  // slower than the failing one
      finished[r] = true;
    });
  });
  EXPECT_EQ(e.code(), PL_ERR_RUNTIME);
  EXPECT_THAT(e.what(), StartsWith("replica 2 (device 2): "));
  EXPECT_THAT(e.what(), HasSubstr("boom in two"));
  for (int r : {0, 1, 3}) EXPECT_TRUE(finished[r].load()) << "replica " << r << " was not joined";

  const auto e2 = error_of([&] {
    st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
      if (r == 3) throw std::runtime_error("three");
      if (r == 1) {
        std::this_thread::sleep_for(50ms);  // fails last, but is the lowest
        throw std::runtime_error("one");
      }
    });
  });
  EXPECT_THAT(e2.what(), AllOf(StartsWith("replica 1 (device 1): "), HasSubstr("one")));

  std::atomic<int> calls{0};
  st->run_step([&](int, int, PL_Device, PL_Parameter*, size_t) { ++calls; });
  EXPECT_EQ(calls.load(), n);
}

TEST_F(DpStrategy, SetupReplicaMismatchesAreNamed) {
  const int n = 3;
  auto st = make(n);
  Replicas reps(n);
  auto bad = [&](const std::function<void(std::vector<PL_Parameter>&)>& mutate, int replica = 1) {
    std::vector<PL_Parameter> p = reps[replica].params();  // a mutated copy of the table
    mutate(p);
    return error_of([&] { st->setup_replica(replica, p); });
  };
  EXPECT_THAT(bad([](auto&) {}).what(), HasSubstr("setup_replica(1) was called before setup"));
  st->setup(reps[0].params());

  auto e = bad([](auto& p) { p.pop_back(); });
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), HasSubstr("has 7 entries but setup registered 8"));
  e = bad([](auto& p) { std::swap(p[0], p[1]); });  // order
  EXPECT_THAT(e.what(), AllOf(HasSubstr("entry 0 is named 'layer0.bias'"), HasSubstr("'layer0.weight'")));
  e = bad([](auto& p) { p[3].name = "layer1.w"; });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("entry 3 is named 'layer1.w'"), HasSubstr("'layer1.weight'")));
  e = bad([](auto& p) {
    p[3].value.ndim = 2;
    p[3].value.shape[0] = 10;
    p[3].value.shape[1] = 100;
  });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("entry 3 'layer1.weight'"), HasSubstr("shape [10, 100]"), HasSubstr("[1000]")));
  e = bad([](auto& p) { p[7].value.dtype = PL_F32; });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'head.weight'"), HasSubstr("dtype float32"), HasSubstr("float64")));
  e = bad([](auto& p) { p[2].requires_grad = 1; });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'bn.running_mean'"), HasSubstr("requires_grad 1 but the root's is 0")));
  e = bad([](auto& p) { p[1].value.device = {PL_DEVICE_CUDA, 1}; });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'layer0.bias' value is on cuda:1"), HasSubstr("the device type must match")));
  e = bad([](auto& p) { p[1].grad.device = {PL_DEVICE_CUDA, 1}; });
  EXPECT_THAT(e.what(), HasSubstr("'layer0.bias' grad is on cuda:1 but the root's is on cpu:0 (the device type must "
                                  "match)"));
  e = bad([](auto& p) { p[4].grad.numel = 2; });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'layer1.bias'"), HasSubstr("grad is float32[2]"), HasSubstr("float32[3]")));
  e = bad([&](auto& p) { p[5].grad.data = reps[0].params()[5].grad.data; });
  EXPECT_THAT(e.what(),
              HasSubstr("'layer2.weight' grad is the root's own memory; each replica needs its own gradients"));
  e = bad([&](auto& p) { p[5].value.data = reps[0].params()[5].value.data; });
  EXPECT_THAT(e.what(), HasSubstr("'layer2.weight' value is the root's own memory; each replica needs its own copy"));
  e = bad([](auto& p) { p[0].value.data = nullptr; });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'layer0.weight' value"), HasSubstr("data is NULL")));
  e = bad([](auto& p) { p[0].struct_size = 8; });
  EXPECT_EQ(e.code(), PL_ERR_VERSION);

  e = bad([](auto&) {}, 0);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("replica 0 is out of range: valid 1..2"), HasSubstr("replica 0 is setup's")));
  e = error_of([&] { st->setup_replica(3, reps[1].params()); });
  EXPECT_THAT(e.what(), HasSubstr("replica 3 is out of range: valid 1..2"));
  st->setup_replica(1, reps[1].params());
  e = error_of([&] { st->setup_replica(1, reps[1].params()); });
  EXPECT_THAT(e.what(), HasSubstr("replica 1 (device 1) is already registered"));

  // One replica: nothing to register.
  auto one = make(1);
  Replicas single(2);
  one->setup(single[0].params());
  EXPECT_THAT(error_of([&] { one->setup_replica(1, single[1].params()); }).what(), HasSubstr("drives 1 replica"));
}

// The root's own checks: a device of another kind than the accelerator's.
TEST_F(DpStrategy, SetupChecksTheRootTable) {
  auto st = make(2);
  Model m(ddptest::standard_specs());
  m.params()[3].value.device = {PL_DEVICE_CUDA, 0};
  const auto e = error_of([&] { st->setup(m.params()); });
  EXPECT_THAT(e.what(),
              AllOf(HasSubstr("dp: setup: entry 3 'layer1.weight' value is on cuda:0"), HasSubstr("cpu device")));
  m.params()[3].value.device = {PL_DEVICE_CPU, 0};
  st->setup(m.params());
  EXPECT_THAT(error_of([&] { st->setup(m.params()); }).what(), HasSubstr("setup was called twice"));
}

TEST_F(DpStrategy, RunStepAndAfterBackwardNameTheMissingReplica) {
  auto st = make(3);
  Replicas reps(3);
  auto noop = [](int, int, PL_Device, PL_Parameter*, size_t) {};
  EXPECT_THAT(error_of([&] { st->run_step(noop); }).what(), HasSubstr("run_step was called before setup"));
  st->setup(reps[0].params());
  st->setup_replica(1, reps[1].params());
  auto e = error_of([&] { st->run_step(noop); });
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("run_step"), HasSubstr("replica 2 (device 2) was not registered"),
                              HasSubstr("setup_replica(2")));
  EXPECT_THAT(error_of([&] { st->after_backward(); }).what(), HasSubstr("replica 2 (device 2) was not registered"));
  st->setup_replica(2, reps[2].params());
  st->run_step(noop);
  st->after_backward();
}

TEST_F(DpStrategy, DpWithSeveralProcessesIsRejected) {
  auto c = config(2);
  c.world = 2;
  const auto e = create_error(c);
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(e.what(),
               "strategy 'dp' runs in one process on one node (world_size=2); use 'ddp2' for several nodes or 'ddp'");
}

TEST_F(DpStrategy, ConfigErrorsNameTheBadValue) {
  auto c = config(2);
  c.device_ids = {};
  EXPECT_THAT(create_error(c).what(), HasSubstr("num_devices is 0"));
  c.device_ids = {0, 1, 1};
  EXPECT_THAT(create_error(c).what(), HasSubstr("device 1 appears twice in device_ids"));
  c.device_ids = {0, -3};
  EXPECT_THAT(create_error(c).what(), HasSubstr("device_ids[1] is -3"));
  c = config(2);
  c.accelerator = pl::Accelerator();
  EXPECT_THAT(create_error(c).what(), HasSubstr("accelerator are required for 2 replicas"));
  c = config(1);
  c.accelerator = pl::Accelerator();
  EXPECT_NO_THROW(dptest::Strategy(*rt_, "dp", c));  // one replica copies and sums nothing
  c = config(2);
  c.rank = 2;
  EXPECT_THAT(create_error(c).what(), AllOf(HasSubstr("global_rank 2"), HasSubstr("world_size 1")));
  // ddp2 over several processes needs the rendezvous store; its inner ddp says so.
  c = config(2);
  c.world = 2;
  const auto e = create_error(c, "ddp2");
  EXPECT_THAT(e.what(), AllOf(StartsWith("ddp2: "), HasSubstr("store is NULL"), HasSubstr("world_size is 2")));
}

TEST_F(DpStrategy, OptionErrorsListTheValidOnes) {
  auto c = config(2);
  c.options = {{"bucket_cap_mb", "5"}};
  auto e = create_error(c);
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("unknown option 'bucket_cap_mb'"), HasSubstr("takes no options")));
  c.options = {{"broadcast_buffers", "true"}};
  e = create_error(c, "ddp2");
  EXPECT_THAT(e.what(), AllOf(HasSubstr("ddp2: unknown option 'broadcast_buffers'"), HasSubstr("bucket_cap_mb"),
                              HasSubstr("pg.<name>")));
  c.options = {{"bucket_cap_mb", "abc"}};
  e = create_error(c, "ddp2");
  EXPECT_THAT(e.what(), AllOf(HasSubstr("bucket_cap_mb='abc'"), HasSubstr("MiB > 0")));
  c.options = {{"pg.", "1"}};
  EXPECT_THAT(create_error(c, "ddp2").what(), HasSubstr("pg.<name>"));
  // Valid ones at world size 1 (pg.* reach a group only when there is one).
  c.options = {{"bucket_cap_mb", "0.5"}, {"pg.probe_ms", "100"}};
  EXPECT_NO_THROW(dptest::Strategy(*rt_, "ddp2", c));
}

TEST_F(DpStrategy, GetStatAndProcessGroup) {
  auto st = make(2);
  Replicas reps(2);
  reps.register_with(*st);
  st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) { dptest::write_grads(reps[r], 0, r, 0); });
  st->after_backward();
  EXPECT_EQ(st->stat("replicas"), 2);
  EXPECT_EQ(st->stat("steps"), 1);
  EXPECT_GE(st->stat("broadcast_ms"), 0);
  EXPECT_GT(st->stat("reduce_ms"), 0);
  EXPECT_EQ(st->stat("allreduce_ms"), 0);
  const auto e = error_of([&] { st->stat("exposed_allreduce_ms"); });
  EXPECT_EQ(e.code(), PL_ERR_NOT_FOUND);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'exposed_allreduce_ms'"),
                              HasSubstr("replicas, steps, broadcast_ms, reduce_ms, allreduce_ms")));
  EXPECT_EQ(st->process_group().second, nullptr);
  auto d2 = make(2, "ddp2");  // one process: no group either
  EXPECT_EQ(d2->process_group().first, nullptr);
  EXPECT_EQ(d2->process_group().second, nullptr);
}

// Grad sync off changes nothing within a process: the replicas' sum always happens.
TEST_F(DpStrategy, NoSyncStillSumsTheReplicas) {
  for (const char* name : {"dp", "ddp2"}) {
    auto st = make(2, name);
    Replicas reps(2);
    reps.register_with(*st);
    st->set_grad_sync(false);
    st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) { dptest::write_grads(reps[r], 0, r, 1); });
    st->after_backward();
    EXPECT_EQ(reps[0].grad(0, 3), ddptest::grad_value(0, 3, 0, 1) * 3) << name;
  }
}

// teardown joins the threads; the instance can be set up again; destroy after a failed setup, or
// without teardown in the middle of a run, is safe.
TEST_F(DpStrategy, TeardownAndSetupAgain) {
  auto st = make(3);
  Replicas reps(3);
  reps.register_with(*st);
  st->run_step([](int, int, PL_Device, PL_Parameter*, size_t) {});
  st->after_backward();
  st->teardown();
  EXPECT_THAT(error_of([&] { st->after_backward(); }).what(), HasSubstr("after_backward was called before setup"));
  reps.register_with(*st);
  st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) { dptest::write_grads(reps[r], 0, r, 2); });
  st->after_backward();
  EXPECT_EQ(reps[0].grad(3, 10), ddptest::grad_value(3, 10, 0, 2) * 6);

  auto failed = make(2);
  Model m(ddptest::standard_specs());
  m.params()[1].grad.numel = 1;
  EXPECT_THAT(error_of([&] { failed->setup(m.params()); }).what(), HasSubstr("(they must match)"));
  failed.reset();  // destroy after the failed setup
}

// The step function may not call back into the strategy's state-changing entries.
TEST_F(DpStrategy, CallsFromInsideAStepAreRefused) {
  auto st = make(2);
  Replicas reps(2);
  reps.register_with(*st);
  std::string seen;
  st->run_step([&](int r, int, PL_Device, PL_Parameter*, size_t) {
    if (r != 0) return;
    PL_Error* e = st->api()->after_optimizer_step(st->get());
    ASSERT_NE(e, nullptr);
    seen = pl_error_message(e);
    pl_error_destroy(e);
  });
  EXPECT_THAT(seen, HasSubstr("after_optimizer_step was called while run_step is running"));
}

}  // namespace
