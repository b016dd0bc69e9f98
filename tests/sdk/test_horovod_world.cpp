// The seeds' horovod examples (gpu_intermediate): Trainer(strategy="horovod", accelerator="gpu",
// devices=1) under `horovodrun -np 4` (one machine) and `horovodrun -np 8 -H h1:4,h2:4`, and
// Trainer(strategy="horovod") on CPU.  Lightning takes horovod's world size from Horovod and gives
// each process one local device, whatever devices says; plrt's JobSession does the same (the
// launcher's environment read as ClusterEnv reads horovodrun's, the GPUs assumed).  A devices
// count beyond one per process that the launcher contradicts is a warning naming both; other
// strategies keep their error.  The real runs under mpirun: tests/training/test_seed_examples.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/error.hpp>

#include "job_session.hpp"

namespace {

using ::testing::HasSubstr;
using Env = std::map<std::string, std::string>;

// horovodrun's variables for rank `rank` of `size`, `local` per host.
Env horovodrun(int rank, int size, int local) {
  return {{"HOROVOD_RANK", std::to_string(rank)},
          {"HOROVOD_SIZE", std::to_string(size)},
          {"HOROVOD_LOCAL_RANK", std::to_string(rank % local)},
          {"HOROVOD_LOCAL_SIZE", std::to_string(local)},
          {"HOROVOD_CROSS_RANK", std::to_string(rank / local)},
          {"HOROVOD_CROSS_SIZE", std::to_string(size / local)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29600"},
          {"HOROVOD_CONTROLLER", "gloo"}};
}

struct Resolved {
  plrt::sdk::JobSession s;
  std::vector<std::string> warnings;
};

void collect(void* user, PL_LogLevel level, const char* line) {
  if (level == PL_LOG_WARN) static_cast<std::vector<std::string>*>(user)->push_back(line);
}

std::unique_ptr<Resolved> resolve(const Env& env, const std::string& accelerator, pl::Devices devices,
                                  const std::string& strategy = "horovod", int num_nodes = 1) {
  auto r = std::make_unique<Resolved>();
  r->s.env = pl::ClusterEnv::detect(env);
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  ro.use_env_dirs = false;
  ro.log_level = "warn";
  ro.log_callback = collect;
  ro.log_user = &r->warnings;
  r->s.start_runtime(ro);
  pl::JobRequest req;
  req.accelerator = accelerator;
  req.devices = std::move(devices);
  req.strategy = strategy;
  req.num_nodes = num_nodes;
  req.assume_device_count = accelerator == "gpu" ? 4 : -1;
  r->s.resolve(req, plrt::sdk::Driver::Trainer);
  return r;
}

// `horovodrun -np 4 python train.py` with devices=1: four processes, GPU i for local rank i.
TEST(HorovodWorld, GpuDevicesOneUnderNp4TakesTheLaunchersFourWithOneGpuEach) {
  for (int rank = 0; rank < 4; ++rank) {
    auto r = resolve(horovodrun(rank, 4, 4), "gpu", 1);
    EXPECT_EQ(r->s.job.world_size, 4);
    EXPECT_EQ(r->s.job.processes_per_node, 4);
    EXPECT_EQ(r->s.job.num_nodes, 1);
    EXPECT_EQ(r->s.job.devices, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(r->s.rank, rank);
    EXPECT_EQ(r->s.local_rank, rank);  // JobSession::open takes devices[local_rank]
    EXPECT_EQ(r->s.job.process_group_backend, "nccl");
    EXPECT_THAT(r->warnings, ::testing::IsEmpty()) << "devices=1 is the page's own example";
  }
}

// `horovodrun -np 8 -H hostname1:4,hostname2:4`: two nodes of four.
TEST(HorovodWorld, GpuUnderNp8OnTwoHostsIsTwoNodesOfFour) {
  auto r = resolve(horovodrun(5, 8, 4), "gpu", 1);
  EXPECT_EQ(r->s.job.world_size, 8);
  EXPECT_EQ(r->s.job.num_nodes, 2);
  EXPECT_EQ(r->s.job.processes_per_node, 4);
  EXPECT_EQ(r->s.node_rank, 1);
  EXPECT_EQ(r->s.local_rank, 1);
}

// Trainer(strategy="horovod") on CPU: the launcher's processes, no warning.
TEST(HorovodWorld, CpuWithDevicesLeftAtAutoTakesTheLaunchersWorld) {
  auto r = resolve(horovodrun(0, 2, 2), "cpu", pl::Devices::automatic());
  EXPECT_EQ(r->s.job.world_size, 2);
  EXPECT_EQ(r->s.job.device_type, PL_DEVICE_CPU);
  EXPECT_THAT(r->warnings, ::testing::IsEmpty());
}

// devices=4 under -np 2: the launcher wins, with a warning naming both (rank 0 only).
TEST(HorovodWorld, MoreDevicesThanTheLauncherStartedIsAWarningNamingBoth) {
  auto r = resolve(horovodrun(0, 2, 2), "cpu", 4);
  EXPECT_EQ(r->s.job.world_size, 2);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0], HasSubstr("WORLD_SIZE=2"));
  EXPECT_THAT(r->warnings[0], HasSubstr("devices=4 x num_nodes=1 = 4 is ignored"));
  EXPECT_THAT(resolve(horovodrun(1, 2, 2), "cpu", 4)->warnings, ::testing::IsEmpty());
  // devices=2 under 2 processes per host on 2 hosts: devices agrees, num_nodes left at 1 is silent
  auto agree = resolve(horovodrun(0, 4, 2), "cpu", 2);
  EXPECT_EQ(agree->s.job.world_size, 4);
  EXPECT_THAT(agree->warnings, ::testing::IsEmpty());
  // num_nodes=3 against the launcher's 2 hosts: named
  auto nodes = resolve(horovodrun(0, 4, 2), "cpu", 2, "horovod", 3);
  ASSERT_EQ(nodes->warnings.size(), 1u);
  EXPECT_THAT(nodes->warnings[0], HasSubstr("num_nodes=3"));
}

// Other strategies keep the launcher check: ddp's devices must agree.
TEST(HorovodWorld, DdpStillRefusesALauncherThatDisagrees) {
  try {
    resolve(horovodrun(0, 4, 4), "gpu", 1, "ddp");
    FAIL() << "ddp with devices=1 under 4 processes was accepted";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the launcher started WORLD_SIZE=4 processes (launched by horovod)"));
  }
}

// Uneven hosts (3 processes, 2 per host) cannot be devices x num_nodes: an error naming both.
TEST(HorovodWorld, UnevenProcessesPerNodeIsAnErrorNamingThem) {
  Env env = horovodrun(0, 3, 2);
  env["HOROVOD_CROSS_SIZE"] = "2";
  try {
    resolve(env, "cpu", 1);
    FAIL() << "3 processes at 2 per node were accepted";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("WORLD_SIZE=3 with LOCAL_WORLD_SIZE=2"));
  }
}

}  // namespace
