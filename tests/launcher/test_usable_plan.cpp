// plrun's launch plan for devices="usable[:N]": resolved once by plrun, the workers get the list
// (probing again, each would find its siblings' devices busy).  Other DEVICES values pass as given.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "launch_plan.hpp"

using namespace plrt::launcher;

namespace {

pl::JobConfig cuda_job(PL_LaunchMode mode, std::vector<int> devices) {
  pl::JobConfig c;
  c.strategy = "test";
  c.accelerator = "cuda";
  c.launch_mode = mode;
  c.devices = std::move(devices);
  c.processes_per_node = mode == PL_LAUNCH_PROCESS_PER_DEVICE ? static_cast<int>(c.devices.size()) : 1;
  c.world_size = c.processes_per_node;
  return c;
}

std::map<std::string, std::string> env_of(const WorkerSpec& w) { return {w.env.begin(), w.env.end()}; }

}  // namespace

TEST(UsablePlan, EveryWorkerGetsTheResolvedList) {
  for (const char* form : {"usable:2", "usable", " usable:-1 "}) {
    LaunchOptions o;
    o.trainer_flags = {{"ACCELERATOR", "cuda"}, {"DEVICES", form}};
    const Rendezvous r{"127.0.0.1", 4000, true, "tok"};
    const auto ws = plan_workers(cuda_job(PL_LAUNCH_PROCESS_PER_DEVICE, {1, 3}), o, r);
    ASSERT_EQ(ws.size(), 2u);
    for (const auto& w : ws) {
      EXPECT_EQ(env_of(w)["PL_TRAINER_DEVICES"], "[1, 3]") << form;
      EXPECT_EQ(env_of(w)["PL_TRAINER_ACCELERATOR"], "cuda");
    }
  }
  // A process per node (ddp_spawn) gets the same list for the workers it forks.
  LaunchOptions o;
  o.trainer_flags = {{"DEVICES", "usable:3"}};
  const auto spawn = plan_workers(cuda_job(PL_LAUNCH_SPAWN, {0, 2, 5}), o, Rendezvous{"h", 4000, true, "t"});
  ASSERT_EQ(spawn.size(), 1u);
  EXPECT_EQ(env_of(spawn[0])["PL_TRAINER_DEVICES"], "[0, 2, 5]");
}

TEST(UsablePlan, OtherDevicesValuesPassAsGiven) {
  for (const char* form : {"2", "[1, 3]", "auto", "usablex"}) {
    LaunchOptions o;
    o.trainer_flags = {{"DEVICES", form}};
    const auto ws = plan_workers(cuda_job(PL_LAUNCH_PROCESS_PER_DEVICE, {0, 1}), o, Rendezvous{"h", 4000, true, "t"});
    EXPECT_EQ(env_of(ws[0])["PL_TRAINER_DEVICES"], form);
  }
}
