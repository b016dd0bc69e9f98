// nccl's one-GPU-per-rank check (plugins/process_groups/nccl/gpu_sharing.cpp), without a GPU: the
// identities are given here instead of read from CUDA, and go through a real store, one thread
// per rank, as the plugin's create sends them.  The same check inside a real nccl group, two ranks
// on GPU 0, is in test_pg_nccl.cpp (NcclTwoRanksOneGpu).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gpu_sharing.hpp"

namespace {

using plrt::nccl::GpuIdentity;
using plrt::nccl::shared_gpu_message;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

GpuIdentity gpu(const std::string& host, const std::string& pci, int device) {
  return {host, host + ":boot-" + host, pci, device};
}

TEST(NcclGpuSharing, EveryRankOnItsOwnGpuPasses) {
  EXPECT_EQ(shared_gpu_message({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1c:00.0", 1)}), "");
  // The same PCI bus id on two hosts is two GPUs.
  EXPECT_EQ(shared_gpu_message({gpu("a", "0000:1b:00.0", 0), gpu("b", "0000:1b:00.0", 0)}), "");
  EXPECT_EQ(shared_gpu_message({gpu("a", "0000:1b:00.0", 0)}), "");
}

TEST(NcclGpuSharing, TwoRanksOnOneGpuAreNamedWithWhatToDo) {
  EXPECT_EQ(shared_gpu_message({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1b:00.0", 0)}),
            "nccl needs one GPU per rank: ranks 0 and 1 both use the GPU at PCI 0000:1b:00.0 (cuda:0); NCCL cannot "
            "run two ranks on one GPU. Give each rank its own GPU, or use process_group_backend='gloo' to share one "
            "(CUDA buffers are staged through host memory)");
}

TEST(NcclGpuSharing, ManyRanksOtherIndicesAndOtherHostsAreNamed) {
  // Ranks 0, 2, 3 share one GPU, which CUDA_VISIBLE_DEVICES numbers differently on rank 3.
  const std::string m = shared_gpu_message({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1c:00.0", 1),
                                            gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1b:00.0", 1)});
  EXPECT_THAT(m, HasSubstr("ranks 0, 2 and 3 all use the GPU at PCI 0000:1b:00.0 (cuda:0 on rank 0, cuda:0 on "
                           "rank 2, cuda:1 on rank 3)"));
  EXPECT_THAT(m, ::testing::Not(HasSubstr("rank 1")));
  // Two hosts, each with one shared GPU: both named, with their host.
  const std::string two = shared_gpu_message({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1b:00.0", 0),
                                              gpu("b", "0000:1b:00.0", 0), gpu("b", "0000:1b:00.0", 0)});
  EXPECT_THAT(two, HasSubstr("ranks 0 and 1 both use the GPU at PCI 0000:1b:00.0 on host a (cuda:0); ranks 2 and 3 "
                             "both use the GPU at PCI 0000:1b:00.0 on host b (cuda:0)"));
}

TEST(NcclGpuSharing, IdentitiesRoundTripAndAForeignValueIsNamed) {
  const GpuIdentity g = gpu("node|7", "0000:af:00.0", 3);  // a '|' in a field cannot split it
  const GpuIdentity back = plrt::nccl::decode(plrt::nccl::encode(g), "k");
  EXPECT_EQ(back.hostname, "node_7");
  EXPECT_EQ(back.pci, g.pci);
  EXPECT_EQ(back.device, 3);
  try {
    plrt::nccl::decode("hello", "grp/0/nccl/nccl_gpu/1/1");
    ADD_FAILURE() << "a foreign value was accepted";
  } catch (const plrt::plugin::Failure& f) {
    EXPECT_EQ(f.code, PL_ERR_RUNTIME);
    EXPECT_THAT(f.message,
                HasSubstr("the store key 'grp/0/nccl/nccl_gpu/1/1' holds 'hello', which is not a GPU identity"));
  }
}

TEST(NcclGpuSharing, ThisHostHasANameAndAnId) {
  const GpuIdentity h = plrt::nccl::this_host();
  EXPECT_FALSE(h.hostname.empty());
  EXPECT_GT(h.host_id.size(), h.hostname.size() + 1) << "the boot id is part of the host id: " << h.host_id;
}

// Through a real store, one thread per rank as in create: every rank fails alike, or all pass.
struct Exchange {
  pl::Runtime rt{[] {
    pl::RuntimeOptions o;
    o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
    o.use_env_dirs = false;
    o.use_default_dirs = false;
    o.log_level = "off";
    return o;
  }()};
  pl::Store server{rt, [] {
                     pl::StoreOptions o;
                     o.host = "127.0.0.1";
                     o.port = 0;
                     o.is_server = true;
                     o.token = "gpu-sharing";
                     o.timeout = 10s;
                     return o;
                   }()};

  // Runs the check on every rank given; returns each rank's error ("" when it passed).
  std::vector<std::string> run(const std::vector<GpuIdentity>& ids, int world, std::chrono::milliseconds wait,
                               std::vector<PL_ErrorCode>* codes = nullptr) {
    std::vector<std::string> out(ids.size());
    std::vector<PL_ErrorCode> c(ids.size(), PL_ERR_OK);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ids.size(); ++r)
      threads.emplace_back([&, r] {
        pl::StoreOptions o;
        o.host = "127.0.0.1";
        o.port = server.port();
        o.token = "gpu-sharing";
        o.timeout = 10s;
        pl::Store client(rt, o);
        plrt::pg::StoreClient sc(rt.host(), client.get());
        try {
          plrt::nccl::check_one_gpu_per_rank(sc, "g/0/nccl/nccl_gpu/1/", static_cast<int>(r), world, ids[r],
                                             std::chrono::steady_clock::now() + wait);
        } catch (const plrt::plugin::Failure& f) {
          out[r] = f.message;
          c[r] = f.code;
        }
      });
    for (auto& t : threads) t.join();
    if (codes) *codes = c;
    return out;
  }
};

TEST(NcclGpuSharing, EveryRankFailsAlikeWhenTwoShareAGpu) {
  Exchange x;
  std::vector<PL_ErrorCode> codes;
  const auto errs = x.run({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1b:00.0", 0)}, 2, 10s, &codes);
  for (size_t r = 0; r < errs.size(); ++r) {
    EXPECT_EQ(codes[r], PL_ERR_INVALID_ARGUMENT) << "rank " << r;
    EXPECT_THAT(errs[r], HasSubstr("ranks 0 and 1 both use the GPU at PCI 0000:1b:00.0 (cuda:0)")) << "rank " << r;
  }
  Exchange ok;
  for (const auto& e :
       ok.run({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1c:00.0", 1), gpu("a", "0000:1d:00.0", 2)}, 3, 10s))
    EXPECT_EQ(e, "");
}

TEST(NcclGpuSharing, ARankThatNeverPublishesIsNamedAtTheTimeout) {
  Exchange x;
  std::vector<PL_ErrorCode> codes;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = x.run({gpu("a", "0000:1b:00.0", 0), gpu("a", "0000:1c:00.0", 1)}, 3, 600ms, &codes);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 8s);
  for (size_t r = 0; r < errs.size(); ++r) {
    EXPECT_EQ(codes[r], PL_ERR_TIMEOUT) << errs[r];
    EXPECT_THAT(errs[r], HasSubstr("rank 2 has not published its GPU (did every rank create the group?)"));
  }
}

}  // namespace
