// The nccl process group in one process: it loads and lists without a GPU, refuses CPU buffers and
// missing devices by name, (with a GPU) runs every collective in a world of one rank, and refuses
// two ranks on one GPU by name.  The multi-rank cases are in test_pg_multiprocess (they need one
// GPU per rank).
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <plrt/sdk/process_group.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;

int gpu_count(std::string* why) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);  // leaves n untouched on error: check the code
  if (rc != cudaSuccess) {
    *why = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
    cudaGetLastError();
    return 0;
  }
  if (n == 0) *why = "no CUDA device";
  return n;
}

pl::RuntimeOptions quiet() {
  pl::RuntimeOptions o;
  o.log_level = "warn";
  return o;
}

struct NcclOneRank : ::testing::Test {
  pl::Runtime rt{quiet()};
  pl::Store store{rt, [] {
                    pl::StoreOptions o;
                    o.host = "127.0.0.1";
                    o.port = 0;
                    o.is_server = true;
                    o.token = "nccl-test";
                    o.timeout = std::chrono::milliseconds(10000);
                    return o;
                  }()};
  pl::ProcessGroupOptions options(PL_Device device) {
    pl::ProcessGroupOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.group_name = "nccl-one";
    o.timeout = std::chrono::milliseconds(20000);
    o.device = device;
    return o;
  }
};

TEST_F(NcclOneRank, LoadsAndListsWithoutAGpu) {
  auto ref = rt.find(PL_PLUGIN_PROCESS_GROUP, "nccl");
  EXPECT_EQ(ref.name(), "nccl");
  EXPECT_GE(ref.plugin->abi_minor, 1);
  EXPECT_EQ(ref.plugin->abi_minor, PL_ABI_MINOR);
  const auto* api = ref.api<PL_ProcessGroupApi>();
  ASSERT_TRUE(PL_HAS_FIELD(PL_ProcessGroupApi, api, all_to_all));  // ABI 1.4
  EXPECT_NE(api->all_to_all, nullptr);
}

TEST_F(NcclOneRank, RefusesACpuGroup) {
  try {
    pl::ProcessGroup pg(rt, "nccl", store, options({PL_DEVICE_CPU, 0}));
    FAIL() << "a cpu nccl group was created";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("use gloo for CPU buffers"));
  }
}

TEST_F(NcclOneRank, WithoutAGpuSaysWhy) {
  std::string why;
  if (gpu_count(&why) > 0) GTEST_SKIP() << "this machine has a GPU; the no-GPU message is checked elsewhere";
  try {
    pl::ProcessGroup pg(rt, "nccl", store, options({PL_DEVICE_CUDA, 0}));
    FAIL() << "an nccl group was created without a GPU";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_RUNTIME);
    EXPECT_THAT(e.what(), HasSubstr("no CUDA device is usable"));
    EXPECT_THAT(e.what(), HasSubstr("use the gloo backend"));
  }
}

TEST_F(NcclOneRank, ADeviceThatDoesNotExistIsNamed) {
  std::string why;
  const int n = gpu_count(&why);
  if (n == 0) GTEST_SKIP() << "no GPU (" << why << ")";
  try {
    pl::ProcessGroup pg(rt, "nccl", store, options({PL_DEVICE_CUDA, n}));
    FAIL() << "a group on a missing device was created";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("cuda:" + std::to_string(n) + " does not exist"));
  }
}

// Device memory for `n` values, copied back on demand.
template <class T>
struct DeviceBuf {
  explicit DeviceBuf(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    if (n) {
      EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuf() { cudaFree(ptr); }
  std::vector<T> read() const {
    std::vector<T> out(n);
    if (n) {
      EXPECT_EQ(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }
  PL_Tensor tensor() { return pl::tensor_view(ptr, pl::dtype_of<T>(), static_cast<int64_t>(n), {PL_DEVICE_CUDA, 0}); }
  void* ptr = nullptr;
  size_t n;
};

TEST_F(NcclOneRank, EveryCollectiveInAWorldOfOne) {
  std::string why;
  if (gpu_count(&why) == 0) GTEST_SKIP() << "no GPU (" << why << ")";
  pl::ProcessGroup pg(rt, "nccl", store, options({PL_DEVICE_CUDA, 0}));

  DeviceBuf<float> f({1.5f, -2.0f, 3.0f});
  auto ft = f.tensor();
  for (PL_ReduceOp op : {PL_REDUCE_SUM, PL_REDUCE_AVG, PL_REDUCE_MIN, PL_REDUCE_MAX, PL_REDUCE_PRODUCT})
    pg.allreduce(ft, op);
  EXPECT_EQ(f.read(), (std::vector<float>{1.5f, -2.0f, 3.0f}));

  DeviceBuf<int32_t> i({7, -7, 2147483647});
  auto it = i.tensor();
  pg.allreduce(it, PL_REDUCE_AVG);  // widened to int64: no overflow
  EXPECT_EQ(i.read(), (std::vector<int32_t>{7, -7, 2147483647}));

  DeviceBuf<uint8_t> u({255, 0, 9});
  auto ut = u.tensor();
  pg.broadcast(ut, 0);
  DeviceBuf<uint8_t> g(std::vector<uint8_t>(3, 0));
  std::vector<PL_Tensor> outs{g.tensor()};
  pg.allgather(ut, outs);
  EXPECT_EQ(g.read(), (std::vector<uint8_t>{255, 0, 9}));

  DeviceBuf<int64_t> rs_out(std::vector<int64_t>(3, 0));
  DeviceBuf<int64_t> rs_in({10, 20, 31});
  std::vector<PL_Tensor> ins{rs_in.tensor()};
  auto rs = rs_out.tensor();
  pg.reduce_scatter(ins, rs, PL_REDUCE_AVG);
  EXPECT_EQ(rs_out.read(), (std::vector<int64_t>{10, 20, 31}));

  // all_to_all: its own chunk, with equal chunks and with counts (the count exchange included).
  DeviceBuf<double> a2a_in({1.25, -2.5, 4.0}), a2a_out(std::vector<double>(3, 0.0));
  auto a2a_i = a2a_in.tensor(), a2a_o = a2a_out.tensor();
  pg.all_to_all(a2a_i, a2a_o);
  EXPECT_EQ(a2a_out.read(), (std::vector<double>{1.25, -2.5, 4.0}));
  DeviceBuf<int32_t> a2a_n({5, 6, 7});
  DeviceBuf<int32_t> a2a_m(std::vector<int32_t>(3, 0));
  auto a2a_ni = a2a_n.tensor(), a2a_mo = a2a_m.tensor();
  pg.all_to_all(a2a_ni, a2a_mo, {3}, {3});
  EXPECT_EQ(a2a_m.read(), (std::vector<int32_t>{5, 6, 7}));

  pg.barrier();
  auto w = pg.allreduce_async(ft, PL_REDUCE_SUM);
  w.wait();
  EXPECT_TRUE(w.test());

  // A CPU buffer handed to an nccl group is refused by name.
  std::vector<float> host(3, 1.0f);
  auto ht = pl::tensor_view(host);
  try {
    pg.allreduce(ht);
    FAIL() << "a CPU tensor was accepted";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("is on cpu:0"));
  }
}

// Two ranks (threads here) on GPU 0: NCCL cannot run them, and says so obscurely inside
// ncclCommInitRank.  The group's create finds it first, through the store, and fails on both ranks
// alike with the ranks, the GPU, and what to do instead; neither waits for its timeout.
TEST_F(NcclOneRank, TwoRanksOnOneGpuAreRefusedByNameOnEveryRank) {
  std::string why;
  if (gpu_count(&why) == 0) GTEST_SKIP() << "no GPU (" << why << ")";
  std::vector<std::string> errors(2);
  std::vector<PL_ErrorCode> codes(2, PL_ERR_OK);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      pl::Runtime rank_rt{quiet()};
      pl::StoreOptions so;
      so.host = "127.0.0.1";
      so.port = store.port();
      so.token = "nccl-test";
      so.timeout = std::chrono::milliseconds(10000);
      pl::Store client(rank_rt, so);
      pl::ProcessGroupOptions o = options({PL_DEVICE_CUDA, 0});
      o.rank = r;
      o.world_size = 2;
      o.group_name = "two-on-one";
      try {
        pl::ProcessGroup pg(rank_rt, "nccl", client, o);
        errors[r] = "(created)";
      } catch (const pl::Error& e) {
        codes[r] = e.code();
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15)) << "a rank waited for its timeout";
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], PL_ERR_INVALID_ARGUMENT) << "rank " << r << ": " << errors[r];
    EXPECT_THAT(errors[r], HasSubstr("nccl needs one GPU per rank: ranks 0 and 1 both use the GPU at PCI "));
    EXPECT_THAT(errors[r], HasSubstr("(cuda:0); NCCL cannot run two ranks on one GPU"));
    EXPECT_THAT(errors[r], HasSubstr("use process_group_backend='gloo' to share one"));
  }
}

}  // namespace
