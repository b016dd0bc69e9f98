// The gloo process group made for a device: what it refuses, by name (no accelerator, an
// accelerator of another kind or without a usable device, a device that does not exist, tensors on
// another device), and what staging costs in page-locked memory.  None of this needs a GPU.
#include <gmock/gmock.h>
#include <link.h>

#include "staged_ranks.hpp"

using namespace staged;
using ::testing::HasSubstr;

namespace {

template <class F>
void expect_error(PL_ErrorCode code, F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << parts.front();
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

// Whether a CUDA library (the driver or the runtime) is loaded in this process.
bool cuda_library_loaded() {
  bool found = false;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libcuda.so") != std::string::npos || name.find("libcudart") != std::string::npos)
          *static_cast<bool*>(out) = true;
        return 0;
      },
      &found);
  return found;
}

// A world-of-`world` group's create through the C table; the peers never come, so a create that
// got as far as the rendezvous would wait for its timeout.
struct Creator {
  pl::Runtime rt{gloo_threads::runtime_options()};
  gloo_threads::Job server{1};
  pl::Store store{rt, server.client_options()};
  void create(PL_Device device, const PL_AcceleratorApi* acc_api, PL_Accelerator* acc, int world = 2) {
    Group g(rt, store, 0, world, device, acc_api, acc, "refused", 20s);
  }
};

TEST(GlooStagedErrors, ADeviceGroupWithoutAnAcceleratorIsRefusedAtCreateBeforeAnythingElse) {
  Creator c;
  const bool cuda_before = cuda_library_loaded();
  const auto t0 = gloo_threads::Clock::now();
  expect_error(PL_ERR_INVALID_ARGUMENT,
               [&] {
                 c.create({PL_DEVICE_CUDA, 0}, nullptr, nullptr);
               },
               {"gloo: config->device is cuda:0, but no accelerator was given (config->accelerator_api is NULL)",
                "needs the accelerator that owns cuda:0 to stage its buffers through page-locked host memory",
                "or create the group for the cpu"});
  emulated::Device emu;
  expect_error(PL_ERR_INVALID_ARGUMENT,
               [&] {
                 c.create({PL_DEVICE_CUDA, 1}, emulated::Device::api(), nullptr);
               },
               {"config->device is cuda:1, but no accelerator was given (config->accelerator is NULL)"});
  EXPECT_LT(gloo_threads::ms_since(t0), 5000) << "create waited for peers before refusing the config";
  if (!cuda_before) {
    EXPECT_FALSE(cuda_library_loaded()) << "refusing the config loaded a CUDA library";
  }
}

TEST(GlooStagedErrors, ACpuGroupRefusesDeviceTensorsByName) {
  gloo_threads::Job job(1);
  job.run([&](gloo_threads::Rank& r) {
    Buf b(PL_F32, 4);
    PL_Tensor t = b.tensor();
    t.device = {PL_DEVICE_CUDA, 0};
    try {
      r.pg->allreduce(t, PL_REDUCE_SUM);
      ADD_FAILURE() << "a cpu group took a cuda tensor";
    } catch (const pl::Error& e) {
      EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(), HasSubstr("gloo allreduce: tensor is on cuda:0, but this gloo group takes CPU tensors "
                                      "only (it was created for the cpu)"));
      EXPECT_THAT(e.what(), HasSubstr("with an accelerator, which stages them through host memory"));
    }
  });
}

TEST(GlooStagedErrors, WithoutAGpuTheCudaAcceleratorSaysWhy) {
  Creator c;
  std::unique_ptr<pl::Accelerator> cuda;
  try {
    cuda = std::make_unique<pl::Accelerator>(c.rt, "cuda");
  } catch (const pl::Error& e) {
    GTEST_SKIP() << "the cuda accelerator plugin is not available here: " << e.what();
  }
  if (cuda->device_count() > 0) GTEST_SKIP() << "this machine has a GPU: the staged tests run on it instead";
  expect_error(
      PL_ERR_RUNTIME,
      [&] {
        c.create({PL_DEVICE_CUDA, 0}, cuda->api(), cuda->get());
      },
      {"gloo: config->device is cuda:0, but the accelerator has no usable device (" + cuda->unavailable_reason()});
}

TEST(GlooStagedErrors, AnAcceleratorOfAnotherKindOrWithoutStagingEntriesIsNamed) {
  Creator c;
  pl::Accelerator cpu(c.rt, "cpu");
  expect_error(PL_ERR_INVALID_ARGUMENT,
               [&] {
                 c.create({PL_DEVICE_CUDA, 0}, cpu.api(), cpu.get());
               },
               {"config->device is cuda:0, but the accelerator given drives cpu devices: pass the accelerator that "
                "owns cuda:0"});
  emulated::Device emu;
  PL_AcceleratorApi no_pinned = *emulated::Device::api();
  no_pinned.alloc_host = nullptr;
  expect_error(PL_ERR_UNSUPPORTED,
               [&] {
                 c.create({PL_DEVICE_CUDA, 0}, &no_pinned, emu.instance(c.rt.host()));
               },
               {"the accelerator for cuda:0 lacks an entry that staging needs (alloc_host, free_host, copy, "
                "stream_synchronize)"});
}

TEST(GlooStagedErrors, ADeviceThatDoesNotExistIsNamed) {
  Creator c;
  emulated::Device emu;
  PL_Accelerator* acc = emu.instance(c.rt.host());
  expect_error(PL_ERR_INVALID_ARGUMENT,
               [&] {
                 c.create({PL_DEVICE_CUDA, 2}, emulated::Device::api(), acc);
               },
               {"gloo: config->device cuda:2 does not exist: the accelerator sees 2 device(s), cuda:0..cuda:1"});
  expect_error(PL_ERR_INVALID_ARGUMENT,
               [&] {
                 c.create({PL_DEVICE_CUDA, -1}, emulated::Device::api(), acc);
               },
               {"gloo: config->device cuda:-1 is not valid: device indices start at 0"});
}

TEST(GlooStagedErrors, TensorsOnAnotherDeviceAreRefusedAndTheGroupStaysUsable) {
  emulated::Device emu;
  Job job(2, Kind::kEmulated, &emu);
  job.run([&](Rank& r) {
    DevBuf b(*r.dev, PL_F32, 4);
    PL_Tensor other = b.tensor();
    other.device = {PL_DEVICE_CUDA, 1};
    const std::string rule =
        "but this gloo group takes CPU tensors and tensors on cuda:0, the device it was created for";
    expect_error(PL_ERR_INVALID_ARGUMENT, [&] { r.pg->allreduce(other, PL_REDUCE_SUM); },
                 {"gloo allreduce: tensor is on cuda:1, " + rule});
    expect_error(PL_ERR_INVALID_ARGUMENT,
                 [&] {
                   r.pg->allgather(b.tensor(), {b.tensor(), other});
                 },
                 {"gloo allgather: outputs[1] is on cuda:1, " + rule});
    expect_error(PL_ERR_INVALID_ARGUMENT, [&] { r.pg->send(other, 1 - r.rank, 0); },
                 {"gloo send: tensor is on cuda:1"});
    // all_to_all takes CPU or device tensors, but both of one call on one device.
    Buf host(PL_F32, 4);
    expect_error(
        PL_ERR_INVALID_ARGUMENT, [&] { r.pg->all_to_all(b.tensor(), host.tensor()); },
        {"gloo all_to_all: output is on cpu:0 but input is on cuda:0: input and output must be on one device"});
    expect_error(PL_ERR_INVALID_ARGUMENT, [&] { r.pg->all_to_all(b.tensor(), other); },
                 {"gloo all_to_all: output is on cuda:1, " + rule});
    for (size_t i = 0; i < 4; ++i) b.host.set(i, r.rank + 1);
    b.upload();
    r.pg->allreduce(b.tensor(), PL_REDUCE_SUM);  // nothing above consumed a sequence number
    const Buf& got = b.download();
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got.at(i), 3.0);
  });
}

// One page-locked block per rank serves every collective; it grows once for a bigger op (the
// smaller one is freed), and destroy frees it.
TEST(GlooStagedErrors, PinnedBlocksAreReusedGrownOnceAndFreedAtDestroy) {
  emulated::Device emu;
  const int W = 2;
  Job job(W, Kind::kEmulated, &emu);
  job.run([&](Rank& r) {
    for (size_t n : {size_t{1000}, size_t{1} << 20})
      for (int k = 0; k < 20; ++k) {
        r.dev->reset();
        DevBuf b(*r.dev, PL_F32, n);
        for (size_t i = 0; i < n; i += 97) b.host.set(i, 1);
        b.upload();
        r.pg->allreduce(b.tensor(), PL_REDUCE_SUM);
        std::vector<PL_Tensor> outs{b.tensor_at(0, n / 2), b.tensor_at(n / 2, n / 2)};
        r.pg->allgather(outs[static_cast<size_t>(r.rank)], outs);
      }
  });
  EXPECT_EQ(emu.pinned_allocations(), 2 * W) << "each rank: one block, then one bigger block for 1Mi elements";
  EXPECT_EQ(emu.pinned_outstanding(), 0);
  EXPECT_GE(emu.copies(), 2 * W * 40) << "every op copies in and out";
}

}  // namespace
