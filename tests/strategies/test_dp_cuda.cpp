// dp on the cuda accelerator: replicas on two GPUs (values copied device to device, gradients
// staged through a scratch buffer on the root's GPU), and the device checks of setup_replica.
// Each test skips, saying why, where the cuda plugin, its axpy kernel or the GPUs are missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dp_harness.hpp"

using dptest::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

class DpCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_ = std::make_unique<pl::Runtime>(ddptest::runtime_options("off"));
    try {
      cuda_ = pl::Accelerator(*rt_, "cuda");
    } catch (const pl::Error& e) {
      GTEST_SKIP() << "no cuda accelerator plugin in this build: " << e.what();
    }
  }
  bool has_axpy() const {
    const auto* a = cuda_.api();
    return a->struct_size >= PL_STRUCT_SIZE(PL_AcceleratorApi, axpy) && a->axpy != nullptr;
  }
  dptest::Config config(std::vector<int32_t> ids) const {
    dptest::Config c;
    c.accelerator = cuda_;
    c.device_ids = std::move(ids);
    return c;
  }

  std::unique_ptr<pl::Runtime> rt_;
  pl::Accelerator cuda_;
};

// A cuda plugin without the axpy kernel cannot sum replicas: create says so instead of failing later.
TEST_F(DpCuda, MissingKernelsAreNamedAtCreate) {
  if (has_axpy()) GTEST_SKIP() << "the cuda plugin has axpy (covered by the tests below)";
  const auto e = error_of([&] { dptest::Strategy s(*rt_, "dp", config({0, 1})); });
  EXPECT_EQ(e.code(), PL_ERR_UNSUPPORTED);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("the accelerator lacks"), HasSubstr("axpy"), HasSubstr("2 replicas")));
}

// The checks need no GPU: descriptors are compared, never dereferenced.
TEST_F(DpCuda, ReplicaOnAnotherGpuIsNamed) {
  if (!has_axpy()) GTEST_SKIP() << "the cuda plugin has no axpy kernel yet (dp refuses it at create)";
  dptest::Strategy st(*rt_, "dp", config({0, 1}));
  ddptest::Model root({{"w", PL_F32, 4, true}}), rep({{"w", PL_F32, 4, true}});
  for (auto* m : {&root, &rep})  // both on cuda:0, where replica 1 must be on cuda:1
    for (auto& p : m->params()) p.value.device = p.grad.device = {PL_DEVICE_CUDA, 0};
  st.setup(root.params());
  const auto e = error_of([&] { st.setup_replica(1, rep.params()); });
  EXPECT_THAT(e.what(),
              AllOf(HasSubstr("entry 0 'w' value is on cuda:0"), HasSubstr("replica 1 (device 1) drives cuda:1")));
  root.params()[0].value.device = {PL_DEVICE_CUDA, 1};
  dptest::Strategy st2(*rt_, "dp", config({0, 1}));
  EXPECT_THAT(error_of([&] { st2.setup(root.params()); }).what(), HasSubstr("replica 0 (device 0) drives cuda:0"));
}

// One float32 entry per replica in GPU memory.
struct GpuEntry {
  pl::Accelerator acc;
  PL_Device dev;
  int64_t numel;
  void* value = nullptr;
  void* grad = nullptr;
  std::vector<PL_Parameter> table;
  GpuEntry(pl::Accelerator a, int device, int64_t n) : acc(std::move(a)), dev{PL_DEVICE_CUDA, device}, numel(n) {
    value = acc.alloc(dev, n * 4);
    grad = acc.alloc(dev, n * 4);
    PL_Parameter p{};
    p.struct_size = sizeof p;
    p.name = "w";
    p.value = tensor(value);
    p.grad = tensor(grad);
    p.requires_grad = 1;
    table.push_back(p);
  }
  ~GpuEntry() {
    acc.free(dev, value);
    acc.free(dev, grad);
  }
  PL_Tensor tensor(void* data) const { return pl::tensor_view(data, PL_F32, numel, dev); }
  std::vector<float> read(void* p) const {
    std::vector<float> h(numel);
    acc.copy(h.data(), {PL_DEVICE_CPU, 0}, p, dev, numel * 4);
    return h;
  }
  void write(void* p, const std::vector<float>& h) const { acc.copy(p, dev, h.data(), {PL_DEVICE_CPU, 0}, numel * 4); }
};

TEST_F(DpCuda, TwoGpusCopyValuesAndSumGradients) {
  if (!has_axpy()) GTEST_SKIP() << "the cuda plugin has no axpy kernel yet";
  const int count = cuda_.device_count();
  if (count < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << count << " (" << cuda_.unavailable_reason() << ")";
  const int64_t n = 1000;
  GpuEntry root(cuda_, 0, n), rep(cuda_, 1, n);
  std::vector<float> init(n);
  for (int64_t j = 0; j < n; ++j) init[j] = static_cast<float>(j) * 0.5f;
  root.write(root.value, init);
  dptest::Strategy st(*rt_, "dp", config({0, 1}));
  st.setup(root.table);
  st.setup_replica(1, rep.table);
  GpuEntry* entries[] = {&root, &rep};
  st.run_step([&](int r, int, PL_Device d, PL_Parameter*, size_t) {
    EXPECT_EQ(d.type, PL_DEVICE_CUDA);
    EXPECT_EQ(d.index, r);
    GpuEntry& e = *entries[r];
    EXPECT_EQ(e.read(e.value), init) << "replica " << r << " does not hold the root's values";
    std::vector<float> g(n);
    for (int64_t j = 0; j < n; ++j) g[j] = static_cast<float>((r + 1) * (j % 7));
    e.write(e.grad, g);
  });
  st.after_backward();
  const auto sum = root.read(root.grad);
  for (int64_t j = 0; j < n; ++j) ASSERT_EQ(sum[j], static_cast<float>(3 * (j % 7))) << j;
}

}  // namespace
