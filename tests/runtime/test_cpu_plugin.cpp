// The cpu accelerator through the runtime, entry by entry: the glue between the C table and the
// kernels (the kernels themselves are checked against reference loops in tests/kernels).
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using plrt_test::LogCapture;
using ::testing::HasSubstr;

namespace {

PL_Tensor f32(std::vector<float>& v) {
  return {sizeof(PL_Tensor),
          v.data(),
          PL_F32,
          {PL_DEVICE_CPU, 0},
          static_cast<int64_t>(v.size()),
          1,
          {static_cast<int64_t>(v.size())}};
}

class CpuPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    api = rt.find(PL_PLUGIN_ACCELERATOR, "cpu").api<PL_AcceleratorApi>();
    pl::check(rt.host(), api->create(rt.host(), nullptr, &acc));
  }
  void TearDown() override { api->destroy(acc); }
  void ok(PL_Error* e) { pl::check(rt.host(), e); }

  pl::Runtime rt{isolated({PLRT_BUILD_PLUGIN_DIR})};
  const PL_AcceleratorApi* api = nullptr;
  PL_Accelerator* acc = nullptr;
};

}  // namespace

TEST_F(CpuPlugin, EveryEntryIsProvided) {
  EXPECT_EQ(api->struct_size, sizeof(PL_AcceleratorApi));
  for (auto* fn : {(void*)api->alloc,
                   (void*)api->free_memory,
                   (void*)api->alloc_host,
                   (void*)api->free_host,
                   (void*)api->copy,
                   (void*)api->stream_create,
                   (void*)api->stream_destroy,
                   (void*)api->stream_synchronize,
                   (void*)api->event_create,
                   (void*)api->event_destroy,
                   (void*)api->event_record,
                   (void*)api->event_synchronize,
                   (void*)api->stream_wait_event,
                   (void*)api->fill,
                   (void*)api->scale,
                   (void*)api->axpy,
                   (void*)api->cast,
                   (void*)api->sgd_step,
                   (void*)api->adam_step,
                   (void*)api->quantize_u8,
                   (void*)api->dequantize_u8,
                   (void*)api->gemm,
                   (void*)api->add_bias,
                   (void*)api->sum_rows,
                   (void*)api->relu,
                   (void*)api->relu_backward,
                   (void*)api->cross_entropy,
                   (void*)api->argmax_rows,
                   (void*)api->sum_squares,  // ABI 1.5
                   (void*)api->clamp})
    EXPECT_NE(fn, nullptr);
}

// ABI 1.5: gradient clipping's kernels, and their errors as PL_Error naming the argument.
TEST_F(CpuPlugin, ClippingKernelsThroughTheTable) {
  std::vector<float> x = {3, -4, 12};
  double sum = 1;
  PL_Tensor tx = f32(x), ts{sizeof(PL_Tensor), &sum, PL_F64, {PL_DEVICE_CPU, 0}, 1, 1, {1}};
  ok(api->sum_squares(acc, &tx, &ts, nullptr));
  EXPECT_EQ(sum, 1 + 9 + 16 + 144);
  ok(api->clamp(acc, &tx, -3.5, 3.5, nullptr));
  EXPECT_EQ(x, (std::vector<float>{3, -3.5f, 3.5f}));
  auto msg = error_of([&] { ok(api->clamp(acc, &tx, 1, -1, nullptr)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("lo 1 is greater than hi -1"));
  msg = error_of([&] { ok(api->clamp(acc, &tx, NAN, 1, nullptr)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("must not be NaN"));
  std::vector<float> wrong(1);
  PL_Tensor tw = f32(wrong);
  msg = error_of([&] { ok(api->sum_squares(acc, &tx, &tw, nullptr)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("out is float32"));
  EXPECT_EQ(x, (std::vector<float>{3, -3.5f, 3.5f})) << "a refused call writes nothing";
}

TEST_F(CpuPlugin, DevicesAndMemory) {
  PL_DeviceAvailability a{};
  a.struct_size = sizeof a;
  ok(api->availability(acc, &a));
  EXPECT_EQ(a.device_count, 1);
  PL_DeviceInfo info{};
  info.struct_size = sizeof info;
  ok(api->device_info(acc, 0, &info));
  EXPECT_GT(info.total_memory, 0u);
  EXPECT_GT(std::string(info.name).size(), 0u);
  ok(api->set_device(acc, 0));
  auto msg = error_of([&] { ok(api->set_device(acc, 1)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("device index 1"));

  void* p = nullptr;
  ok(api->alloc(acc, {PL_DEVICE_CPU, 0}, 1000, &p));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::vector<uint8_t> src(1000, 7);
  ok(api->copy(acc, p, {PL_DEVICE_CPU, 0}, src.data(), {PL_DEVICE_CPU, 0}, src.size(), nullptr));
  EXPECT_EQ(static_cast<uint8_t*>(p)[999], 7);
  ok(api->free_memory(acc, {PL_DEVICE_CPU, 0}, p));
  msg = error_of([&] { ok(api->alloc(acc, {PL_DEVICE_CUDA, 0}, 8, &p)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("cuda:0"));
}

TEST_F(CpuPlugin, StreamsAndEvents) {
  PL_Stream* s = nullptr;
  PL_Event* e = nullptr;
  ok(api->stream_create(acc, {PL_DEVICE_CPU, 0}, &s));
  ok(api->event_create(acc, {PL_DEVICE_CPU, 0}, &e));
  ok(api->event_record(acc, e, s));
  ok(api->stream_wait_event(acc, s, e));
  ok(api->event_synchronize(acc, e));
  ok(api->stream_synchronize(acc, s));
  ok(api->event_destroy(acc, e));
  ok(api->stream_destroy(acc, s));
}

TEST_F(CpuPlugin, KernelsThroughTheTable) {
  std::vector<float> x(5), y(5, 1.0f);
  auto tx = f32(x), ty = f32(y);
  ok(api->fill(acc, &tx, 2.0, nullptr));
  ok(api->scale(acc, &tx, 1.5, nullptr));      // x = 3
  ok(api->axpy(acc, &ty, 2.0, &tx, nullptr));  // y = 1 + 6
  EXPECT_FLOAT_EQ(y[4], 7.0f);

  std::vector<uint16_t> h(5);
  PL_Tensor th{sizeof(PL_Tensor), h.data(), PL_BF16, {PL_DEVICE_CPU, 0}, 5, 1, {5}};
  ok(api->cast(acc, &th, &ty, nullptr));
  EXPECT_EQ(h[0], 0x40E0);  // 7.0 in bfloat16

  std::vector<float> p = {1, 2}, g = {0.5f, -1}, m(2), v(2);
  auto tp = f32(p), tg = f32(g), tm = f32(m), tv = f32(v);
  PL_SgdParams sgd{sizeof(PL_SgdParams), 0.1, 0.9, 0.0, 0.0, 0, 1};
  ok(api->sgd_step(acc, &tp, &tg, &tm, &sgd, nullptr));
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * 0.5f);
  PL_AdamParams adam{sizeof(PL_AdamParams), 0.01, 0.9, 0.999, 1e-8, 0.0, 1, 0, 0, 0};
  std::fill(m.begin(), m.end(), 0.0f);
  ok(api->adam_step(acc, &tp, &tg, &tm, &tv, &adam, nullptr));
  EXPECT_NEAR(p[1], 2.1f + 0.01f, 1e-5);  // SGD moved it to 2.1; Adam's first step moves lr * sign(g)

  std::vector<float> src = {0, 1, 2, 3, 4, 5, 6, 7}, back(8), mm(4);
  std::vector<uint8_t> q(8);
  auto ts = f32(src), tb = f32(back), tmm = f32(mm);
  PL_Tensor tq{sizeof(PL_Tensor), q.data(), PL_U8, {PL_DEVICE_CPU, 0}, 8, 1, {8}};
  ok(api->quantize_u8(acc, &ts, &tq, &tmm, 4, nullptr));
  EXPECT_EQ(q[3], 255);
  EXPECT_FLOAT_EQ(mm[2], 4.0f);
  ok(api->dequantize_u8(acc, &tq, &tmm, &tb, 4, nullptr));
  for (size_t i = 0; i < src.size(); ++i) EXPECT_NEAR(back[i], src[i], 3.0 / 510 + 1e-6);
}

TEST_F(CpuPlugin, LayerKernelsThroughTheTable) {
  // [[1,2,3],[4,5,6]] @ [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1}, c(4, NAN), bias = {0.5f, -20};
  PL_Tensor ta = f32(a), tb = f32(b), tc = f32(c), tbias = f32(bias);
  ta.ndim = tb.ndim = tc.ndim = 2;
  ta.shape[0] = 2, ta.shape[1] = 3, tb.shape[0] = 3, tb.shape[1] = 2, tc.shape[0] = 2, tc.shape[1] = 2;
  ok(api->gemm(acc, 0, 0, 1.0, &ta, &tb, 0.0, &tc, nullptr));
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  ok(api->add_bias(acc, &tc, &tbias, nullptr));
  ok(api->relu(acc, &tc, &tc, nullptr));
  EXPECT_EQ(c, (std::vector<float>{4.5f, 0, 10.5f, 0}));
  std::vector<int64_t> idx(2);
  PL_Tensor tidx{sizeof(PL_Tensor), idx.data(), PL_I64, {PL_DEVICE_CPU, 0}, 2, 1, {2}};
  ok(api->argmax_rows(acc, &tc, &tidx, nullptr));
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 0}));
  // A shape error comes back as a PL_Error naming both shapes.
  auto msg = error_of([&] { ok(api->gemm(acc, 0, 0, 1.0, &ta, &ta, 0.0, &tc, nullptr)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("[2, 3]"));
}

TEST_F(CpuPlugin, NumThreadsOptionIsCheckedAndApplied) {
  PL_Accelerator* other = nullptr;
  for (const char* bad : {"0", "-2", "two", "3x", ""}) {
    PL_Option o{sizeof(PL_Option), "num_threads", bad};
    PL_OptionList list{sizeof(PL_OptionList), &o, 1};
    auto msg = error_of([&] { ok(api->create(rt.host(), &list, &other)); }, PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(msg, HasSubstr("num_threads '" + std::string(bad) + "'"));
    EXPECT_THAT(msg, HasSubstr(">= 1"));
    EXPECT_EQ(other, nullptr);
  }
  // A valid count reaches OpenBLAS: create logs the pool size it ends up with.
  LogCapture log;
  pl::RuntimeOptions o = isolated({PLRT_BUILD_PLUGIN_DIR});
  o.log_level = "debug";
  o.log_callback = &LogCapture::callback;
  o.log_user = &log;
  pl::Runtime verbose(o);
  const auto* vapi = verbose.find(PL_PLUGIN_ACCELERATOR, "cpu").api<PL_AcceleratorApi>();
  PL_Option one{sizeof(PL_Option), "num_threads", "1"};
  PL_OptionList list{sizeof(PL_OptionList), &one, 1};
  pl::check(verbose.host(), vapi->create(verbose.host(), &list, &other));
  EXPECT_TRUE(log.contains("gemm uses 1 OpenBLAS thread(s)")) << log.all();
  vapi->destroy(other);
}

TEST_F(CpuPlugin, BadLocalWorldSizeIsNamed) {
  // Without num_threads, LOCAL_WORLD_SIZE sets the default share; a malformed one is an error.
  const char* saved_lws = std::getenv("LOCAL_WORLD_SIZE");
  const std::string lws = saved_lws ? saved_lws : "";
  const char* saved_ob = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string ob = saved_ob ? saved_ob : "";
  ::unsetenv("OPENBLAS_NUM_THREADS");
  ::setenv("LOCAL_WORLD_SIZE", "zero", 1);
  PL_Accelerator* other = nullptr;
  auto msg = error_of([&] { ok(api->create(rt.host(), nullptr, &other)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("LOCAL_WORLD_SIZE"));
  EXPECT_THAT(msg, HasSubstr("'zero'"));
  ::setenv("LOCAL_WORLD_SIZE", "1000000", 1);  // more processes than threads: still one each
  ok(api->create(rt.host(), nullptr, &other));
  api->destroy(other);
  if (saved_lws)
    ::setenv("LOCAL_WORLD_SIZE", lws.c_str(), 1);
  else
    ::unsetenv("LOCAL_WORLD_SIZE");
  if (saved_ob) ::setenv("OPENBLAS_NUM_THREADS", ob.c_str(), 1);
}

TEST_F(CpuPlugin, UnknownOptionIsRefused) {
  PL_Option o{sizeof(PL_Option), "threads", "4"};
  PL_OptionList list{sizeof(PL_OptionList), &o, 1};
  PL_Accelerator* other = nullptr;
  auto msg = error_of([&] { ok(api->create(rt.host(), &list, &other)); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("threads"));
}

TEST_F(CpuPlugin, EntryRefusesAHostOfAnotherMajorVersion) {
  // What a future runtime with ABI 2 would hand it: the generated entry must say no.
  auto ref = rt.find(PL_PLUGIN_ACCELERATOR, "cpu");
  void* lib = ::dlopen(ref.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto entry = reinterpret_cast<PL_PluginEntryFn>(::dlsym(lib, PL_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  PL_Host future = *rt.host();
  future.abi_major = 2;
  const PL_Plugin* d = reinterpret_cast<const PL_Plugin*>(0x1);
  auto msg = error_of([&] { ok(entry(&future, &d)); }, PL_ERR_VERSION);
  EXPECT_THAT(msg, HasSubstr("v1 host"));
  EXPECT_EQ(d, nullptr);
  // And the real host is accepted.
  ok(entry(rt.host(), &d));
  EXPECT_EQ(d, ref.plugin);
  ::dlclose(lib);
}
