// The ddp and ddp_spawn plugins in one process: the descriptor and launch info, the config and
// option errors, a job of one rank (no store, no group), get_stat, and the misuse errors of the
// step protocol.  Several ranks: test_ddp_multiprocess.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <plrt/sdk/store.hpp>

#include "ddp_harness.hpp"
#include "expect_error.hpp"

using ddptest::Model;
using strattest::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

class DdpStrategy : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_ = std::make_unique<pl::Runtime>(ddptest::runtime_options());
    cfg_.accelerator = pl::Accelerator(*rt_, "cpu");
  }
  // The error that creating `name` with `cfg` gives (fails the test when there is none).
  pl::Error create_error(const ddptest::StrategyConfig& cfg, const std::string& name = "ddp") {
    try {
      ddptest::Strategy s(*rt_, name, cfg);
    } catch (const pl::Error& e) {
      return e;
    }
    ADD_FAILURE() << "creating " << name << " succeeded";
    return pl::Error(PL_ERR_OK, "");
  }
  pl::Error option_error(const std::string& key, const std::string& value) {
    auto c = cfg_;
    c.options = {{key, value}};
    return create_error(c);
  }

  std::unique_ptr<pl::Runtime> rt_;
  ddptest::StrategyConfig cfg_;
};

PL_LaunchInfo launch_info_of(const pl::Runtime& rt, const std::string& name) {
  auto ref = rt.find(PL_PLUGIN_STRATEGY, name);
  PL_LaunchInfo li{};
  li.struct_size = sizeof li;
  PL_OptionList none{sizeof(PL_OptionList), nullptr, 0};
  EXPECT_EQ(ref.api<PL_StrategyApi>()->launch_info(&none, &li), nullptr);
  return li;
}

TEST_F(DdpStrategy, LaunchInfoOfDdpAndDdpSpawn) {
  const auto ddp = launch_info_of(*rt_, "ddp");
  EXPECT_EQ(ddp.mode, PL_LAUNCH_PROCESS_PER_DEVICE);
  EXPECT_EQ(ddp.needs_process_group, 1);
  EXPECT_EQ(ddp.max_devices_per_process, 1);
  const auto spawn = launch_info_of(*rt_, "ddp_spawn");
  EXPECT_EQ(spawn.mode, PL_LAUNCH_SPAWN);
  EXPECT_EQ(spawn.needs_process_group, 1);
  EXPECT_EQ(spawn.max_devices_per_process, 1);
  for (const char* name : {"ddp", "ddp_spawn"}) {
    auto ref = rt_->find(PL_PLUGIN_STRATEGY, name);
    EXPECT_EQ(ref.name(), name);
    EXPECT_THAT(ref.plugin->description, HasSubstr("DistributedDataParallel"));
    const auto* api = ref.api<PL_StrategyApi>();
    EXPECT_EQ(api->struct_size, sizeof(PL_StrategyApi));
    EXPECT_NE(api->get_stat, nullptr);
    EXPECT_NE(api->on_grad_ready, nullptr);
  }
}

TEST_F(DdpStrategy, UnknownOptionListsTheValidNames) {
  const auto e = option_error("bucket_size_mb", "5");
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(),
              AllOf(HasSubstr("'bucket_size_mb'"), HasSubstr("bucket_cap_mb"), HasSubstr("first_bucket_cap_mb"),
                    HasSubstr("broadcast_buffers"), HasSubstr("pg.<name>")));
  EXPECT_THAT(option_error("pg.", "1").what(), HasSubstr("pg.<name>"));
}

TEST_F(DdpStrategy, BadOptionValuesAreNamed) {
  for (const char* v : {"-1", "0", "abc", "nan", "inf", "1e9", " 5", "5MB", ""}) {
    const auto e = option_error("bucket_cap_mb", v);
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << v;
    EXPECT_THAT(e.what(), AllOf(HasSubstr(std::string("bucket_cap_mb='") + v + "'"), HasSubstr("MiB > 0"))) << v;
  }
  EXPECT_THAT(option_error("first_bucket_cap_mb", "1e-9").what(), HasSubstr("first_bucket_cap_mb='1e-9'"));
  const auto e = option_error("broadcast_buffers", "maybe");
  EXPECT_THAT(e.what(), AllOf(HasSubstr("broadcast_buffers='maybe'"), HasSubstr("true or false")));
  // pg.* options reach the group's own checks only when there is a group (world size 1: none).
  auto c = cfg_;
  c.options = {
      {"bucket_cap_mb", "0.5"}, {"first_bucket_cap_mb", "2"}, {"broadcast_buffers", "False"}, {"pg.probe_ms", "0"}};
  EXPECT_NO_THROW(ddptest::Strategy(*rt_, "ddp", c));
}

TEST_F(DdpStrategy, ConfigErrorsNameTheBadValue) {
  auto c = cfg_;
  c.world = 2;
  auto e = create_error(c);
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("store"), HasSubstr("world_size is 2")));
  c = cfg_;
  c.rank = 3;
  c.world = 2;
  EXPECT_THAT(create_error(c).what(), AllOf(HasSubstr("global_rank 3"), HasSubstr("0..1")));
  c = cfg_;
  c.device_ids = {0, 1};
  EXPECT_THAT(create_error(c).what(), HasSubstr("one device per process but was given 2"));
  c = cfg_;
  c.world = 0;
  EXPECT_THAT(create_error(c).what(), HasSubstr("world_size 0"));

  // A struct from an older, smaller ABI is refused as such.
  auto ref = rt_->find(PL_PLUGIN_STRATEGY, "ddp");
  PL_StrategyConfig small{};
  small.struct_size = PL_STRUCT_SIZE(PL_StrategyConfig, store);
  small.world_size = 1;
  PL_Strategy* s = nullptr;
  PL_Error* err = ref.api<PL_StrategyApi>()->create(rt_->host(), &small, &s);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(pl_error_code(err), PL_ERR_VERSION);
  EXPECT_THAT(pl_error_message(err), HasSubstr("struct_size"));
  pl_error_destroy(err);
  EXPECT_EQ(s, nullptr);
}

TEST_F(DdpStrategy, UnknownProcessGroupBackendIsNamed) {
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.token = "ddp-test";
  pl::Store store(*rt_, so);
  auto c = cfg_;
  c.world = 2;
  c.store = store.get();
  c.backend = "no_such_backend";
  const auto e = create_error(c);
  EXPECT_EQ(e.code(), PL_ERR_NOT_FOUND);
  EXPECT_THAT(e.what(), HasSubstr("process_group_backend 'no_such_backend'"));
}

// pg.<name> options go to the group as <name>: the group's own check names an unknown one (before
// it waits for any peer).
TEST_F(DdpStrategy, PgOptionsReachTheProcessGroup) {
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.token = "ddp-test";
  pl::Store store(*rt_, so);
  auto c = cfg_;
  c.world = 2;
  c.store = store.get();
  c.options = {{"pg.no_such_knob", "1"}};
  const auto e = create_error(c);
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("creating the 'gloo' process group"), HasSubstr("'no_such_knob'"),
                              HasSubstr("probe_ms"), HasSubstr("pg.<name> reach it as <name>")));
}

TEST_F(DdpStrategy, OneRankNeedsNoStoreAndLeavesGradientsAlone) {
  ddptest::Strategy st(*rt_, "ddp", cfg_);
  Model m(ddptest::standard_specs());
  for (size_t i = 0; i < m.size(); ++i)
    for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_value(i, j, ddptest::init_value(i, j, 0));
  st.setup(m.params());
  for (int s = 0; s < 3; ++s) {
    m.zero_grads();
    st.run_step([&](PL_Device d, PL_Parameter* p, size_t n) {
      EXPECT_EQ(d.type, PL_DEVICE_CPU);
      ASSERT_EQ(n, m.size());
      for (size_t i = n; i-- > 0;) {
        if (!p[i].requires_grad) continue;
        for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_grad(i, j, ddptest::grad_value(i, j, 0, s));
        st.on_grad_ready(i);
      }
    });
    st.after_backward();
    for (size_t i = 0; i < m.size(); ++i)
      for (int64_t j = 0; j < m.spec(i).numel; j += 7) {
        if (m.spec(i).requires_grad) {
          EXPECT_EQ(m.grad(i, j), ddptest::grad_value(i, j, 0, s)) << m.spec(i).name << j;
        }
        EXPECT_EQ(m.value(i, j), ddptest::init_value(i, j, 0));
      }
  }
  EXPECT_EQ(st.stat("steps"), 3);
  EXPECT_EQ(st.stat("buckets"), ddptest::kDefaultCapBuckets);
  EXPECT_EQ(st.stat("bucket_bytes"), m.grad_bytes());
  EXPECT_EQ(st.stat("early_launches"), 0);  // nothing to launch alone
  EXPECT_EQ(st.stat("allreduce_ms"), 0);
  auto [api, pg] = st.process_group();
  EXPECT_EQ(api, nullptr);
  EXPECT_EQ(pg, nullptr);
  st.teardown();
}

TEST_F(DdpStrategy, BucketCountFollowsTheCaps) {
  const std::vector<std::pair<std::pair<std::string, std::string>, int>> cases = {
      {{"0.001", "0.001"}, ddptest::kSmallCapBuckets},
      {{"0.001", "1"}, ddptest::kDefaultCapBuckets},
      {{"25", "1"}, ddptest::kDefaultCapBuckets},
      // 0.004 MiB = 4194 bytes: [head.weight] [layer2.bias, layer2.weight, layer1.bias] (adding
      // layer1.weight would make 4228) [layer1.weight, layer0.bias] [layer0.weight]
      {{"0.004", "0.004"}, 4},
  };
  for (const auto& [caps, want] : cases) {
    auto c = cfg_;
    c.options = {{"bucket_cap_mb", caps.first}, {"first_bucket_cap_mb", caps.second}};
    ddptest::Strategy st(*rt_, "ddp_spawn", c);
    Model m(ddptest::standard_specs());
    st.setup(m.params());
    EXPECT_EQ(st.stat("buckets"), want) << "bucket_cap_mb " << caps.first << ", first " << caps.second;
    EXPECT_EQ(st.stat("bucket_bytes"), m.grad_bytes());
  }
}

struct Lines {
  std::mutex mu;
  std::vector<std::pair<PL_LogLevel, std::string>> lines;
  static void callback(void* user, PL_LogLevel level, const char* line) {
    auto* self = static_cast<Lines*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(level, line);
  }
};

// The layout is logged at debug at setup; steps log nothing at info or above.
TEST_F(DdpStrategy, LogsTheBucketLayoutAtDebugAndNothingPerStep) {
  Lines log;
  auto ro = ddptest::runtime_options("debug");
  ro.log_callback = &Lines::callback;
  ro.log_user = &log;
  pl::Runtime rt(ro);
  auto c = cfg_;
  c.accelerator = pl::Accelerator(rt, "cpu");
  c.options = {{"bucket_cap_mb", "0.001"}, {"first_bucket_cap_mb", "0.001"}};
  ddptest::Strategy st(rt, "ddp", c);
  Model m(ddptest::standard_specs());
  st.setup(m.params());
  {
    std::lock_guard<std::mutex> lock(log.mu);
    bool layout = false, first = false;
    for (const auto& [level, line] : log.lines) {
      layout = layout || (level == PL_LOG_DEBUG && line.find("5 gradient buckets, 5776 bytes") != std::string::npos);
      first = first || (level == PL_LOG_DEBUG && line.find("bucket 1: 3 parameters, 228 bytes of float32, first "
                                                           "'layer2.bias'") != std::string::npos);
    }
    EXPECT_TRUE(layout && first) << "the debug log lacks the bucket layout";
    log.lines.clear();
  }
  for (int s = 0; s < 3; ++s) {
    st.run_step([&](PL_Device, PL_Parameter*, size_t) { st.on_grad_ready(0); });
    st.after_backward();
  }
  std::lock_guard<std::mutex> lock(log.mu);
  for (const auto& [level, line] : log.lines) EXPECT_LT(level, PL_LOG_INFO) << line;
}

TEST_F(DdpStrategy, GetStatUnknownNameListsTheKnownOnes) {
  ddptest::Strategy st(*rt_, "ddp", cfg_);
  const auto e = error_of([&] { st.stat("allreduce_seconds"); });
  EXPECT_EQ(e.code(), PL_ERR_NOT_FOUND);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'allreduce_seconds'"),
                              HasSubstr("known: steps, buckets, bucket_bytes, early_launches, exposed_allreduce_ms, "
                                        "allreduce_ms")));
}

TEST_F(DdpStrategy, StepProtocolMisuseIsNamed) {
  ddptest::Strategy st(*rt_, "ddp", cfg_);
  EXPECT_THAT(error_of([&] { st.on_grad_ready(0); }).what(), HasSubstr("before setup"));
  EXPECT_THAT(error_of([&] { st.after_backward(); }).what(), HasSubstr("before setup"));
  Model m(ddptest::standard_specs());
  st.setup(m.params());
  EXPECT_THAT(error_of([&] { st.setup(m.params()); }).what(), HasSubstr("setup was called twice"));

  st.on_grad_ready(3);
  auto e = error_of([&] { st.on_grad_ready(3); });
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("twice"), HasSubstr("'layer1.weight' (index 3)")));
  EXPECT_THAT(error_of([&] { st.on_grad_ready(2); }).what(),
              AllOf(HasSubstr("'bn.running_mean'"), HasSubstr("requires_grad 0")));
  EXPECT_THAT(error_of([&] { st.on_grad_ready(8); }).what(), AllOf(HasSubstr("param_index 8"), HasSubstr("0..7")));
  EXPECT_THAT(error_of([&] { st.set_grad_sync(false); }).what(), HasSubstr("in the middle of a step"));
  EXPECT_THAT(error_of([&] { st.run_step([](PL_Device, PL_Parameter*, size_t) {}); }).what(),
              HasSubstr("call after_backward first"));
  st.after_backward();
  st.set_grad_sync(false);  // between steps: fine
  st.on_grad_ready(3);      // a new step
  st.after_backward();
  st.teardown();
  st.setup(m.params());  // a strategy is set up again after teardown (fit, then test)
  EXPECT_EQ(st.stat("steps"), 2);
}

TEST_F(DdpStrategy, BadParametersAreNamed) {
  ddptest::Strategy st(*rt_, "ddp", cfg_);
  Model m(ddptest::standard_specs());
  auto params = m.params();
  params[4].grad.dtype = PL_F64;
  EXPECT_THAT(error_of([&] { st.setup(params); }).what(),
              AllOf(HasSubstr("'layer1.bias' (index 4)"), HasSubstr("float64[3]"), HasSubstr("float32[3]")));
  params = m.params();
  params[1].value.device = {PL_DEVICE_CUDA, 1};
  EXPECT_THAT(error_of([&] { st.setup(params); }).what(), AllOf(HasSubstr("'layer0.bias'"), HasSubstr("cuda:1")));
  params = m.params();
  params[0].struct_size = 8;
  EXPECT_EQ(error_of([&] { st.setup(params); }).code(), PL_ERR_VERSION);
  st.setup(m.params());  // the failed calls left nothing behind
}

}  // namespace
