// Resolving Lightning's knobs into a job: what plrun --dry-run prints.
#include "test_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {
pl::Runtime make_runtime() { return pl::Runtime(isolated({PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR})); }
}  // namespace

TEST(JobConfig, DefaultsAsLightning) {
  auto rt = make_runtime();
  auto c = rt.resolve({});
  EXPECT_EQ(c.accelerator, "cpu");  // no cuda plugin with devices here
  EXPECT_THAT(c.devices, ElementsAre(0));
  EXPECT_EQ(c.strategy, "single_device");
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.num_nodes, 1);
  EXPECT_EQ(c.process_group_backend, "gloo");
  EXPECT_EQ(c.precision, "32-true");
}

TEST(JobConfig, CpuProcessesTimesNodes) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.accelerator = "cpu";
  r.devices = 3;
  r.strategy = "independent_c";
  r.num_nodes = 2;
  auto c = rt.resolve(r);
  EXPECT_THAT(c.devices, ElementsAre(0, 1, 2));
  EXPECT_EQ(c.processes_per_node, 3);
  EXPECT_EQ(c.world_size, 6);
  EXPECT_EQ(c.launch_mode, PL_LAUNCH_PROCESS_PER_DEVICE);
}

TEST(JobConfig, AliasPresetsReachTheConfig) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.strategy = "independent_c_half";
  auto c = rt.resolve(r);
  EXPECT_EQ(c.strategy, "independent_c_half");
  EXPECT_EQ(c.strategy_plugin, "independent_c");
  ASSERT_EQ(c.strategy_options.size(), 1u);
  EXPECT_EQ(c.strategy_options[0].second, "0.5");
}

TEST(JobConfig, SingleDeviceRefusesSeveralDevices) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.devices = 2;
  r.strategy = "single_device";
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("'single_device' drives at most 1 device(s) per process but devices resolves to 2"));
}

TEST(JobConfig, AutoStrategyWithSeveralDevicesIsDdp) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.accelerator = "cpu";
  r.devices = 2;
  auto c = rt.resolve(r);
  EXPECT_EQ(c.strategy, "ddp");
  EXPECT_EQ(c.strategy_plugin, "ddp");
  EXPECT_EQ(c.launch_mode, PL_LAUNCH_PROCESS_PER_DEVICE);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.process_group_backend, "gloo");
}

TEST(JobConfig, PrecisionSpellings) {
  auto rt = make_runtime();
  for (auto [in, out] : std::vector<std::pair<std::string, std::string>>{
           {"32", "32-true"}, {"16", "16-mixed"}, {"bf16", "bf16-mixed"}, {"bf16-mixed", "bf16-mixed"}}) {
    pl::JobRequest r;
    r.precision = in;
    EXPECT_EQ(rt.resolve(r).precision, out);
  }
  pl::JobRequest r;
  r.precision = "8-bit";
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("precision='8-bit'"));
  EXPECT_THAT(msg, HasSubstr("32-true, 16-mixed, bf16-mixed"));
}

TEST(JobConfig, BadNumNodes) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.num_nodes = -3;
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("num_nodes=-3"));
}

TEST(JobConfig, NcclNeedsCuda) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.accelerator = "cpu";
  r.process_group_backend = "nccl";
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("process_group_backend='nccl' needs CUDA devices"));
}

TEST(JobConfig, UnknownAccelerator) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.accelerator = "tpu";
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_NOT_FOUND);
  EXPECT_THAT(msg, HasSubstr("no accelerator plugin named 'tpu'"));
  EXPECT_THAT(msg, HasSubstr("cpu"));
}

TEST(JobConfig, CpuDeviceErrorsComeThrough) {
  auto rt = make_runtime();
  pl::JobRequest r;
  r.accelerator = "cpu";
  r.devices = 0;
  error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  r.devices = pl::Devices(1.5);
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("1.5"));
}
