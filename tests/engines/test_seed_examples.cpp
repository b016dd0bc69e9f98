// Every Trainer(...) example of the seed pages (../shared/seeds: gpu_basic old and current editions,
// gpu_intermediate) run as its plrt equivalent, expecting what Lightning does: the same
// accelerator, devices, strategy, world size and launch, and the same effective batch size.
//  - GPU examples: plrun --dry-run with --assume-device-count 8 (a machine of 8 GPUs), row by row
//    with the page and line it comes from.
//  - Their CPU twins train for real under plrun (one step, fast_dev_run): the trainer's effective
//    batch size is Lightning's (dp and ddp2 split a batch over the devices; the others multiply).
//  - horovod (gpu_intermediate 215-218): the world size comes from the launcher (mpirun, and mpirun
//    with horovodrun's variables), whatever devices says: devices left at auto, devices=1, and
//    devices=4 under 2 processes (a warning naming both).  The GPU form with horovodrun -np 4 / -np 8
//    on two hosts: tests/sdk/test_horovod_world.cpp.  torch.distributed.run (gpu_intermediate
//    488-510): test_engine_training.cpp's torchrun engines; SLURM: tests/slurm.
#include <gmock/gmock.h>

#include "engines_support.hpp"

namespace {

using namespace plrt_engines;
using plrt_training::run;

struct Example {
  std::string where;  // page:line of the seed
  std::vector<std::string> flags;
  std::string accelerator, strategy, launch;
  int world_size, processes_per_node, num_nodes, devices;
  std::string precision = "32-true";
};

std::vector<Example> gpu_examples() {
  const std::string ppd = "process_per_device", single = "single_process";
  std::vector<Example> out = {
      // gpu_basic (old edition, 000) and current (004)
      {"000:28 004:33 devices=1",
       {"--accelerator", "gpu", "--devices", "1"},
       "cuda",
       "single_device",
       single,
       1,
       1,
       1,
       1},
      {"000:39 devices=4", {"--accelerator", "gpu", "--devices", "4"}, "cuda", "ddp", ppd, 4, 4, 1, 4},
      {"000:55 004:57 devices=k (3)", {"--accelerator", "gpu", "--devices", "3"}, "cuda", "ddp", ppd, 3, 3, 1, 3},
      {"000:58 004:60 list(range(k))",
       {"--accelerator", "gpu", "--devices", "[0, 1, 2]"},
       "cuda",
       "ddp",
       ppd,
       3,
       3,
       1,
       3},
      {"000:61 004:63 [0, 1]", {"--accelerator", "gpu", "--devices", "[0, 1]"}, "cuda", "ddp", ppd, 2, 2, 1, 2},
      {"000:64 004:66 \"0, 1\"", {"--accelerator", "gpu", "--devices", "0, 1"}, "cuda", "ddp", ppd, 2, 2, 1, 2},
      {"000:68 004:70 devices=-1", {"--accelerator", "gpu", "--devices", "-1"}, "cuda", "ddp", ppd, 8, 8, 1, 8},
      {"004:35 devices=8", {"--accelerator", "gpu", "--devices", "8"}, "cuda", "ddp", ppd, 8, 8, 1, 8},
      {"004:37 devices=auto", {"--accelerator", "gpu", "--devices", "auto"}, "cuda", "ddp", ppd, 8, 8, 1, 8},
      {"004:28 all auto (no GPU visible: cpu)",
       {"--accelerator", "auto", "--devices", "auto", "--strategy", "auto", "--assume-device-count", "0"},
       "cpu",
       "single_device",
       single,
       1,
       1,
       1,
       1},
      {"004:30 Trainer()", {"--assume-device-count", "0"}, "cpu", "single_device", single, 1, 1, 1, 1},
      {"001:462 precision=16",
       {"--accelerator", "gpu", "--devices", "1", "--precision", "16"},
       "cuda",
       "single_device",
       single,
       1,
       1,
       1,
       1,
       "16-mixed"},
      {"001:470 ddp precision=16",
       {"--accelerator", "gpu", "--devices", "2", "--strategy", "ddp", "--precision", "16"},
       "cuda",
       "ddp",
       ppd,
       2,
       2,
       1,
       2,
       "16-mixed"},
      // every strategy at 8 GPUs, on one node and on 10 (000:273-295; 001:56-143)
      {"001:56 dp 2", {"--accelerator", "gpu", "--devices", "2", "--strategy", "dp"}, "cuda", "dp", single, 1, 1, 1, 2},
      {"000:291 dp 8",
       {"--accelerator", "gpu", "--devices", "8", "--strategy", "dp"},
       "cuda",
       "dp",
       single,
       1,
       1,
       1,
       8},
      {"000:290 ddp2 8",
       {"--accelerator", "gpu", "--devices", "8", "--strategy", "ddp2"},
       "cuda",
       "ddp2",
       single,
       1,
       1,
       1,
       8},
      {"000:294 ddp2 8 x 10 nodes",
       {"--accelerator", "gpu", "--devices", "8", "--strategy", "ddp2", "--num-nodes", "10"},
       "cuda",
       "ddp2",
       single,
       10,
       1,
       10,
       8},
      {"001:125 ddp2 8 x 4 nodes",
       {"--accelerator", "gpu", "--devices", "8", "--strategy", "ddp2", "--num-nodes", "4"},
       "cuda",
       "ddp2",
       single,
       4,
       1,
       4,
       8},
      {"001:80 ddp 8 x 4 nodes",
       {"--accelerator", "gpu", "--devices", "8", "--strategy", "ddp", "--num-nodes", "4"},
       "cuda",
       "ddp",
       ppd,
       32,
       8,
       4,
       8},
      {"001:251 bagua 4",
       {"--accelerator", "gpu", "--devices", "4", "--strategy", "bagua"},
       "cuda",
       "bagua",
       ppd,
       4,
       4,
       1,
       4},
  };
  for (const char* s : {"ddp", "ddp_spawn", "ddp_sharded", "horovod"}) {
    const std::string launch = std::string(s) == "ddp_spawn" ? "spawn" : ppd;
    out.push_back({std::string("000:27x ") + s + " 8",
                   {"--accelerator", "gpu", "--devices", "8", "--strategy", s},
                   "cuda",
                   s,
                   launch,
                   8,
                   8,
                   1,
                   8});
    out.push_back({std::string("000:28x ") + s + " 8 x 10 nodes",
                   {"--accelerator", "gpu", "--devices", "8", "--strategy", s, "--num-nodes", "10"},
                   "cuda",
                   s,
                   launch,
                   80,
                   8,
                   10,
                   8});
  }
  for (const char* algorithm :
       {"gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "async", "qadam"})
    out.push_back({std::string("001:260-312 bagua ") + algorithm,
                   {"--accelerator", "gpu", "--devices", "4", "--strategy", "bagua", "--strategy-option",
                    std::string("algorithm=") + algorithm},
                   "cuda",
                   "bagua",
                   ppd,
                   4,
                   4,
                   1,
                   4});
  return out;
}

TEST(SeedExamples, GpuTrainerExamplesResolveAsLightningDoes) {
#ifndef PLRT_HAS_CUDA_PLUGIN
  GTEST_SKIP() << "the cuda accelerator plugin is not part of this build";
#endif
  for (const auto& e : gpu_examples()) {
    SCOPED_TRACE(e.where);
    std::vector<std::string> argv{PLRUN_PATH, "--dry-run"};
    argv.insert(argv.end(), e.flags.begin(), e.flags.end());
    if (std::find(e.flags.begin(), e.flags.end(), "--assume-device-count") == e.flags.end())
      argv.insert(argv.end(), {"--assume-device-count", "8"});
    auto r = run(argv);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j.at("accelerator"), e.accelerator);
    EXPECT_EQ(j.at("strategy"), e.strategy);
    EXPECT_EQ(j.at("launch"), e.launch);
    EXPECT_EQ(j.at("world_size"), e.world_size);
    EXPECT_EQ(j.at("processes_per_node"), e.processes_per_node);
    EXPECT_EQ(j.at("num_nodes"), e.num_nodes);
    EXPECT_EQ(j.at("devices").size(), static_cast<size_t>(e.devices));
    EXPECT_EQ(j.at("precision"), e.precision);
    EXPECT_EQ(j.at("process_group_backend"), e.accelerator == "cuda" ? "nccl" : "gloo");
  }
}

// The CPU twins, trained: Lightning's effective batch size is batch x devices x nodes, except dp and
// ddp2, whose batch is split over the devices of a process.
TEST(SeedExamples, CpuTwinsTrainWithLightningsEffectiveBatchSize) {
  TempDir dir;
  struct Twin {
    std::string strategy;
    int world, effective;
  };
  for (const Twin& t : {Twin{"dp", 1, 32}, Twin{"ddp2", 1, 32}, Twin{"ddp", 2, 64}, Twin{"ddp_spawn", 2, 64},
                        Twin{"ddp_sharded", 2, 64}, Twin{"bagua", 2, 64}, Twin{"horovod", 2, 64}}) {
    SCOPED_TRACE(t.strategy);
    const std::string rep = dir / (t.strategy + ".json");
    auto r = run(plrt_training::plrun(t.strategy, 2,
                                      plrt_training::mlp_args({"--batch-size", "32", "--fast-dev-run", "1",
                                                               "--root-dir", dir / t.strategy, "--report", rep})));
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    const auto j = plrt_training::report(rep);
    EXPECT_EQ(j.value("world_size", 0), t.world) << j.dump();
    EXPECT_EQ(j.value("effective_batch_size", 0), t.effective) << j.dump();
    EXPECT_EQ(j.value("strategy", ""), t.strategy);
  }
}

// gpu_intermediate: Trainer(strategy="horovod") "number of processes provided on command-line".
class SeedHorovod : public ::testing::TestWithParam<bool> {};  // true: horovodrun's variables

TEST_P(SeedHorovod, TheWorldSizeComesFromTheLauncherWhateverDevicesSays) {
  if (auto why = absent("mpirun"); !why.empty()) GTEST_SKIP() << why;
  const bool as_horovodrun = GetParam();
  TempDir dir;
  const std::string token = plrt_test::random_token();
  struct Case {
    std::string name;
    std::vector<std::string> devices;
    bool warns;
  };
  for (const Case& c :
       {Case{"auto", {}, false}, Case{"one", {"--devices", "1"}, false}, Case{"four", {"--devices", "4"}, true}}) {
    SCOPED_TRACE("devices " + c.name);
    std::vector<std::string> flags{
        "--strategy",      "horovod",    "--accelerator", "cpu",      "--batch-size",          "32", "--max-steps", "2",
        "--no-checkpoint", "--root-dir", dir / c.name,    "--report", dir / (c.name + ".json")};
    flags.insert(flags.end(), c.devices.begin(), c.devices.end());
    auto program = plrt_training::mlp_args(flags);
    if (as_horovodrun) program = through_shell(kAsHorovodrun, program);
    auto r = run(mpirun(2,
                        {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(plrt_test::free_tcp_ports(1)),
                         "PL_JOB_TOKEN=" + token},
                        program),
                 {{"PL_LOG_LEVEL", "info"}});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    const auto j = plrt_training::report(dir / (c.name + ".json"));
    EXPECT_EQ(j.value("world_size", 0), 2) << j.dump();
    EXPECT_EQ(j.value("effective_batch_size", 0), 64) << j.dump();
    EXPECT_THAT(r.output, ::testing::HasSubstr("learning rate 0.05 -> 0.1")) << "Lightning scales lr by hvd.size()";
    const bool warned = r.output.find("devices=4 x num_nodes=1 = 4 is ignored") != std::string::npos;
    EXPECT_EQ(warned, c.warns) << r.output;
    if (c.warns) {
      EXPECT_THAT(r.output, ::testing::HasSubstr("WORLD_SIZE=2"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Launchers, SeedHorovod, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "horovodrun_env" : "mpirun"; });

}  // namespace
