// pl::GradientSync: a strategy over parameters the test owns (plain arrays, as a libtorch program's
// tensors would be).  Two ranks run as threads of this process (each its own runtime, ClusterEnv
// given), so ddp's and bagua's gradient means are checked against the mean computed here, in the
// test's own memory; then the single-process path and every bad input.
#include <gtest/gtest.h>

#include <numeric>
#include <plrt/sdk/gradient_sync.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sdk_test_support.hpp"
#include "spawn.hpp"

namespace {

using pl::ExternalParameter;
using pl::GradientSync;
using pl::GradientSyncOptions;
using sdk_test::error_of;

PL_Tensor view(std::vector<float>& v, PL_Device device = sdk_test::kCpu) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = v.data();
  t.dtype = PL_F32;
  t.device = device;
  t.numel = static_cast<int64_t>(v.size());
  t.ndim = 1;
  t.shape[0] = t.numel;
  return t;
}

GradientSyncOptions options(const std::string& strategy, int devices, std::optional<pl::ClusterEnv> env) {
  GradientSyncOptions o;
  o.strategy = strategy;
  o.devices = devices;
  o.read_env = false;
  o.cluster = env ? std::move(env) : pl::ClusterEnv{};
  o.timeout = std::chrono::milliseconds(20000);
  o.runtime.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  o.runtime.use_env_dirs = false;
  o.runtime.log_level = "warn";
  return o;
}

pl::ClusterEnv rank_env(int rank, int world, int port) {
  pl::ClusterEnv e;
  e.source = "plrun";
  e.rank = e.local_rank = rank;
  e.world_size = e.local_world_size = world;
  e.master_port = port;
  e.token = "gradient-sync-test";
  return e;
}

// One rank's state: two trainable entries and a buffer.
struct Model {
  std::vector<float> w, gw, b, gb, buf;
  std::vector<ExternalParameter> params() {
    return {{"w", view(w), view(gw), PL_PARAM_TRAINABLE},
            {"b", view(b), view(gb), PL_PARAM_TRAINABLE},
            {"running", view(buf), {}, PL_PARAM_BUFFER}};
  }
};

Model model_of(int rank) {
  Model m;
  m.w = {1.f + rank, 2.f, 3.f, 4.f * (rank + 1), 5.f};
  m.b = {-1.f, 0.5f * (rank + 1)};
  m.buf = {10.f * (rank + 1)};
  m.gw.assign(m.w.size(), 0.f);
  m.gb.assign(m.b.size(), 0.f);
  return m;
}

float grad_value(int rank, size_t i) { return 0.25f * static_cast<float>(i + 1) * (rank == 0 ? 1.f : -3.f) + rank; }

class TwoRanks : public ::testing::TestWithParam<std::string> {};

// Each rank writes its own gradients during backward (reporting one with grad_ready, the other left
// to after_backward); afterwards both hold the mean, in the same memory, and rank 0's values.
TEST_P(TwoRanks, GradientsBecomeTheMeanInTheProgramsMemoryAndRankZerosValuesWin) {
  const int port = plrt_test::free_tcp_port();
  std::vector<Model> models{model_of(0), model_of(1)};
  const Model initial0 = model_of(0);
  std::vector<std::string> errors(2);
  std::vector<std::vector<pl::ParamRange>> seen(2);
  std::vector<std::vector<double>> losses(2);
  auto body = [&](int r) {
    try {
      GradientSync sync(options(GetParam(), 2, rank_env(r, 2, port)));
      EXPECT_EQ(sync.rank(), r);
      EXPECT_EQ(sync.world_size(), 2);
      Model& m = models[static_cast<size_t>(r)];
      const float* gw_memory = m.gw.data();
      sync.setup(m.params());
      sync.backward([&] {
        for (size_t i = 0; i < m.gw.size(); ++i) m.gw[i] = grad_value(r, i);
        sync.grad_ready(0);
        for (size_t i = 0; i < m.gb.size(); ++i) m.gb[i] = grad_value(r, i + 10);
      });
      EXPECT_EQ(m.gw.data(), gw_memory);
      const std::vector<float> mean_w = m.gw;
      sync.optimizer_step([&](const std::vector<pl::ParamRange>& ranges) { seen[static_cast<size_t>(r)] = ranges; });
      losses[static_cast<size_t>(r)] = {1.0 + r, 2.0 * r};
      sync.all_reduce(losses[static_cast<size_t>(r)], PL_REDUCE_SUM);
      // grad sync off (accumulation): the gradients stay each rank's own
      sync.set_grad_sync(false);
      std::vector<float> own(m.gw.size());
      sync.backward([&] {
        for (size_t i = 0; i < m.gw.size(); ++i) own[i] = m.gw[i] = grad_value(r, i) * 2;
        sync.grad_ready(0);
      });
      EXPECT_EQ(m.gw, own) << "rank " << r;
      sync.set_grad_sync(true);
      m.gw = mean_w;  // what the checks below expect
      sync.teardown();
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  };
  std::thread t0(body, 0), t1(body, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) {
    const Model& m = models[static_cast<size_t>(r)];
    EXPECT_EQ(m.w, initial0.w) << "rank " << r;
    EXPECT_EQ(m.b, initial0.b) << "rank " << r;
    for (size_t i = 0; i < m.gw.size(); ++i)
      EXPECT_FLOAT_EQ(m.gw[i], (grad_value(0, i) + grad_value(1, i)) / 2) << "rank " << r << " w " << i;
    for (size_t i = 0; i < m.gb.size(); ++i)
      EXPECT_FLOAT_EQ(m.gb[i], (grad_value(0, i + 10) + grad_value(1, i + 10)) / 2) << "rank " << r << " b " << i;
    ASSERT_EQ(seen[static_cast<size_t>(r)].size(), 2u);  // the trainable entries, whole; not the buffer
    EXPECT_EQ(seen[static_cast<size_t>(r)][0].param, 0u);
    EXPECT_EQ(seen[static_cast<size_t>(r)][0].end, 5);
    EXPECT_EQ(seen[static_cast<size_t>(r)][1].param, 1u);
    EXPECT_EQ(seen[static_cast<size_t>(r)][1].end, 2);
    EXPECT_EQ(losses[static_cast<size_t>(r)], (std::vector<double>{3.0, 2.0}));
  }
  EXPECT_EQ(models[1].buf, initial0.buf);  // ddp's buffer broadcast before the step
}

INSTANTIATE_TEST_SUITE_P(GradientSync, TwoRanks, ::testing::Values("ddp", "bagua"));

// ddp_sharded: each rank is handed its shard (the two ranks' ranges partition every trainable
// element), holds the mean gradient there, and after the step has every element from its owner.
TEST(GradientSync, ShardedStrategyHandsEachRankItsShardAndGathersTheValues) {
  const int port = plrt_test::free_tcp_port();
  std::vector<Model> models{model_of(0), model_of(1)};
  std::vector<std::string> errors(2);
  std::vector<std::vector<pl::ParamRange>> seen(2);
  auto body = [&](int r) {
    try {
      GradientSync sync(options("ddp_sharded", 2, rank_env(r, 2, port)));
      Model& m = models[static_cast<size_t>(r)];
      sync.setup(m.params());
      sync.backward([&] {
        for (size_t i = 0; i < m.gw.size(); ++i) m.gw[i] = grad_value(r, i);
        for (size_t i = 0; i < m.gb.size(); ++i) m.gb[i] = grad_value(r, i + 10);
      });
      sync.optimizer_step([&](const std::vector<pl::ParamRange>& ranges) {
        seen[static_cast<size_t>(r)] = ranges;
        for (const auto& range : ranges) {  // value = 100 + the (mean) gradient, in the shard only
          std::vector<float>& v = range.param == 0 ? m.w : m.b;
          const std::vector<float>& g = range.param == 0 ? m.gw : m.gb;
          for (int64_t i = range.begin; i < range.end; ++i)
            v[static_cast<size_t>(i)] = 100.f + g[static_cast<size_t>(i)];
        }
      });
      sync.teardown();
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  };
  std::thread t0(body, 0), t1(body, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  std::vector<int> owners_w(5, 0), owners_b(2, 0);
  for (int r = 0; r < 2; ++r)
    for (const auto& range : seen[static_cast<size_t>(r)]) {
      ASSERT_LT(range.param, 2u) << "the buffer is never a range";
      for (int64_t i = range.begin; i < range.end; ++i)
        ++(range.param == 0 ? owners_w : owners_b)[static_cast<size_t>(i)];
    }
  EXPECT_EQ(owners_w, std::vector<int>(5, 1));
  EXPECT_EQ(owners_b, std::vector<int>(2, 1));
  EXPECT_FALSE(seen[0].empty() || seen[1].empty()) << "each rank owns a part";
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < 5; ++i)
      EXPECT_FLOAT_EQ(models[static_cast<size_t>(r)].w[i], 100.f + (grad_value(0, i) + grad_value(1, i)) / 2) << r;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_FLOAT_EQ(models[static_cast<size_t>(r)].b[i], 100.f + (grad_value(0, i + 10) + grad_value(1, i + 10)) / 2)
          << r;
  }
}

TEST(GradientSync, OneProcessStepsEveryTrainableEntryAndSyncsNothing) {
  GradientSync sync(options("single_device", 1, std::nullopt));
  EXPECT_EQ(sync.world_size(), 1);
  EXPECT_EQ(sync.launcher(), "none");
  Model m = model_of(0);
  sync.setup(m.params());
  sync.backward([&] { m.gw[0] = 7.f; });
  EXPECT_EQ(m.gw[0], 7.f);
  size_t ranges = 0;
  sync.optimizer_step([&](const std::vector<pl::ParamRange>& r) { ranges = r.size(); });
  EXPECT_EQ(ranges, 2u);
  std::vector<double> x{4.0};
  sync.all_reduce(x, PL_REDUCE_SUM);
  EXPECT_EQ(x[0], 4.0);
}

TEST(GradientSync, ExceptionsOfTheProgramsCodeComeBackUnchanged) {
  GradientSync sync(options("single_device", 1, std::nullopt));
  Model m = model_of(0);
  sync.setup(m.params());
  EXPECT_THROW(sync.backward([] { throw std::runtime_error("forward failed"); }), std::runtime_error);
  sync.backward([] {});
  try {
    sync.optimizer_step([](const std::vector<pl::ParamRange>&) { throw std::logic_error("step failed"); });
    ADD_FAILURE() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "step failed");
  }
}

TEST(GradientSync, StrategiesItCannotDriveAreRefusedByName) {
  auto ddp2 = error_of([] { GradientSync s(options("ddp", 2, std::nullopt)); });
  EXPECT_NE(ddp2.find("needs a launcher: run `plrun --strategy ddp --devices 2"), std::string::npos) << ddp2;
  auto spawn = error_of([] { GradientSync s(options("ddp_spawn", 2, std::nullopt)); });
  EXPECT_NE(spawn.find("strategy 'ddp_spawn' spawns its workers"), std::string::npos) << spawn;
  auto world = error_of([] { GradientSync s(options("ddp", 2, rank_env(0, 3, 1))); });
  EXPECT_NE(world.find("WORLD_SIZE=3"), std::string::npos) << world;
  auto unknown = error_of([] { GradientSync s(options("no_such_strategy", 1, std::nullopt)); });
  EXPECT_NE(unknown.find("no_such_strategy"), std::string::npos) << unknown;
}

// What a strategy asks of the optimizer is the program's to do: bagua's qadam (the SDK would form
// QAdam's first moment) is refused; horovod's requests come back from bind_optimizer, and a step
// without that call is refused rather than run with a learning rate or state the strategy did not
// get.
TEST(GradientSync, WhatAStrategyAsksOfTheOptimizerGoesToTheProgram) {
  auto with = [](const std::string& strategy, pl::OptionList opts) {
    auto o = options(strategy, 1, std::nullopt);
    o.strategy_options = std::move(opts);
    return o;
  };
  {
    GradientSync sync(with("bagua", {{"algorithm", "qadam"}}));
    Model m = model_of(0);
    sync.setup(m.params());
    const std::string sgd = error_of([&] { sync.bind_optimizer("torch.optim.SGD"); });
    EXPECT_NE(sgd.find("QAdam"), std::string::npos) << sgd;
  }
  {
    GradientSync sync(with("bagua", {{"algorithm", "qadam"}}));
    Model m = model_of(0);
    sync.setup(m.params());
    const std::string qadam = error_of([&] { sync.bind_optimizer("QAdam", {{"warmup_steps", "10"}}); });
    EXPECT_NE(qadam.find("strategy 'bagua' averages the optimizer's first moment"), std::string::npos) << qadam;
  }
  // horovod at two ranks (threads): the learning rate x2 and rank 0's optimizer state
  for (const bool bind : {true, false}) {
    const int port = plrt_test::free_tcp_port();
    std::vector<std::string> errors(2);
    std::vector<pl::OptimizerRequests> asked(2);
    auto body = [&](int r) {
      try {
        GradientSync sync(options("horovod", 2, rank_env(r, 2, port)));
        Model m = model_of(r);
        sync.setup(m.params());
        if (bind) asked[static_cast<size_t>(r)] = sync.bind_optimizer("torch.optim.SGD", {{"lr", "0.1"}});
        sync.backward([] {});
        sync.teardown();
      } catch (const pl::Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    };
    std::thread t0(body, 0), t1(body, 1);
    t0.join();
    t1.join();
    for (int r = 0; r < 2; ++r) {
      if (bind) {
        EXPECT_EQ(errors[static_cast<size_t>(r)], "");
        EXPECT_EQ(asked[static_cast<size_t>(r)].lr_scale, 2.0);
        EXPECT_TRUE(asked[static_cast<size_t>(r)].broadcast_optimizer_state);
      } else {
        EXPECT_NE(errors[static_cast<size_t>(r)].find("strategy 'horovod' asks the optimizer for its learning rate x2 "
                                                      "and rank 0's optimizer state; call "
                                                      "GradientSync::bind_optimizer before the first step"),
                  std::string::npos)
            << errors[static_cast<size_t>(r)];
      }
    }
  }
}

TEST(GradientSync, CallsBeforeSetupAreErrors) {
  GradientSync sync(options("single_device", 1, std::nullopt));
  EXPECT_NE(error_of([&] { sync.backward([] {}); }).find("backward was called before setup"), std::string::npos);
  EXPECT_NE(error_of([&] { sync.grad_ready(0); }).find("grad_ready was called before setup"), std::string::npos);
  EXPECT_NE(error_of([&] { sync.optimizer_step([](const auto&) {}); }).find("before setup"), std::string::npos);
  EXPECT_NE(error_of([&] { sync.bind_optimizer("SGD"); }).find("before setup"), std::string::npos);
}

TEST(GradientSync, BadEntriesAreNamedBeforeTheStrategySeesThem) {
  auto setup_error = [](auto mutate) {
    GradientSync sync(options("single_device", 1, std::nullopt));
    Model m = model_of(0);
    auto p = m.params();
    mutate(p, m);
    return error_of([&] { sync.setup(p); });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "[" << msg << "] lacks [" << part << "]";
  };
  has(setup_error([](auto& p, Model&) { p[1].name = ""; }), "entry 1 ('') has no name");
  has(setup_error([](auto& p, Model&) { p[1].name = "w"; }), "entry 1 ('w') repeats a name");
  has(setup_error([](auto& p, Model&) { p[0].kind = 7; }), "has kind 7; valid:");
  has(setup_error([](auto& p, Model&) { p[0].value.data = nullptr; }), "value has no memory");
  has(setup_error([](auto& p, Model&) { p[0].grad.data = nullptr; }), "grad has no memory");
  has(setup_error([](auto& p, Model&) { p[0].value.struct_size = 0; }), "value has struct_size 0");
  has(setup_error([](auto& p, Model&) { p[0].grad.dtype = PL_F64; }), "has a gradient of dtype float64");
  has(setup_error([](auto& p, Model&) { p[0].grad.shape[0] = 4, p[0].grad.numel = 4; }),
      "shaped [4] (numel 4) for a value of dtype float32 shaped [5]");
  has(setup_error([](auto& p, Model&) { p[0].grad = p[0].value; }), "its gradient in its value's memory");
  has(setup_error([](auto& p, Model&) {
        p[0].value.device = {PL_DEVICE_CUDA, 0};
      }),
      "value is on cuda:0 but this process trains on cpu");
  has(setup_error([](auto& p, Model&) { p[0].value.ndim = 9; }), "valid: numel >= 0, ndim 0..");
  has(setup_error([](auto& p, Model&) { p[0].value.numel = 6; }), "value has numel 6 but shape [5]");
  has(setup_error([](auto& p, Model&) { p[1].grad.shape[0] = -2; }), "grad has numel 2 but shape [-2]");

  GradientSync sync(options("single_device", 1, std::nullopt));
  Model m = model_of(0);
  auto p = m.params();
  p[2].grad.dtype = 99;  // a buffer's grad is ignored, whatever it holds
  EXPECT_NO_THROW(sync.setup(p));
  has(error_of([&] { sync.setup(m.params()); }), "setup was called twice");
  has(error_of([&] { sync.grad_ready(3); }), "index 3 is not an entry of setup's 3 (valid: 0 to 3 - 1)");
  has(error_of([&] { sync.grad_ready(2); }), "entry 2 ('running') is not trainable");
  has(error_of([&] { sync.bind_optimizer("SGD", {}, -1); }), "steps -1 is not valid");
}

}  // namespace
