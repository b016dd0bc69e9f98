// The cuda accelerator through the SDK, with or without a GPU: it loads, reports zero devices
// with a reason where there is none, fills every entry of its table, keeps cuBLAS unloaded until a
// gemm needs it, and rejects bad arguments with the cpu reference's codes and messages before it
// touches a device (so these cases run here with device pointers that are never dereferenced).
#include <fstream>
#include <sstream>

#include "test_cuda_support.hpp"

using namespace cuda_test;

namespace {

bool cublas_loaded() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream ss;
  ss << maps.rdbuf();
  return ss.str().find("libcublas") != std::string::npos;
}

}  // namespace

TEST(CudaPlugin, LoadsAndProvidesEveryEntry) {
  const pl::PluginRef ref = runtime().find(PL_PLUGIN_ACCELERATOR, "cuda");
  EXPECT_EQ(ref.plugin->abi_major, PL_ABI_MAJOR);
  EXPECT_EQ(ref.plugin->abi_minor, PL_ABI_MINOR);
  const auto* a = ref.api<PL_AcceleratorApi>();
  EXPECT_EQ(a->struct_size, sizeof(PL_AcceleratorApi));
  EXPECT_EQ(a->device_type, PL_DEVICE_CUDA);
  EXPECT_EQ(a->flags & PL_ACCEL_SYNCHRONOUS, 0);
  // Every field from create to the end of the table (ABI 1.5's clamp) is a function pointer; none
  // may be NULL.
  const size_t first = offsetof(PL_AcceleratorApi, create);
  const size_t all = (sizeof(PL_AcceleratorApi) - first) / sizeof(void (*)());
  EXPECT_EQ(first + all * sizeof(void (*)()), sizeof(PL_AcceleratorApi));
  const size_t count = all;
  EXPECT_EQ(offsetof(PL_AcceleratorApi, clamp), first + (count - 1) * sizeof(void (*)()));
  for (size_t i = 0; i < count; ++i) {
    void (*fn)() = nullptr;
    std::memcpy(&fn, reinterpret_cast<const char*>(a) + first + i * sizeof fn, sizeof fn);
    EXPECT_NE(fn, nullptr) << "entry " << i << " of the table (counting from create) is NULL";
  }
}

TEST(CudaPlugin, ReportsDevicesOrWhyThereAreNone) {
  PL_DeviceAvailability av{};
  av.struct_size = sizeof av;
  ok(api()->availability(cuda().get(), &av));
  EXPECT_EQ(av.struct_size, sizeof av);
  if (av.device_count == 0) {
    const std::string reason = av.reason;
    EXPECT_FALSE(reason.empty());
    EXPECT_NE(reason.find("cudaError"), std::string::npos) << reason;  // the runtime's own error name
    EXPECT_EQ(cuda().unavailable_reason(), reason);
    // No gemm can have run: cuBLAS is opened on the first one only.
    EXPECT_FALSE(cublas_loaded()) << "libcublas was loaded although no gemm ran";
    return;
  }
  for (int i = 0; i < av.device_count; ++i) {
    const PL_DeviceInfo info = cuda().device_info(i);
    EXPECT_FALSE(std::string(info.name).empty());
    EXPECT_GT(info.total_memory, 0u);
    EXPECT_GT(info.free_memory, 0u);
    EXPECT_GE(info.compute_major, 3);
  }
  const Outcome o = outcome(api()->set_device(cuda().get(), av.device_count));
  EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("valid indices 0.." + std::to_string(av.device_count - 1)), std::string::npos) << o.message;
}

TEST(CudaPlugin, DeviceErrorsNameTheTensor) {
  PL_Accelerator* acc = cuda().get();
  std::vector<float> host(4, 1.0f);
  PL_Tensor on_host = tensor(host.data(), PL_F32, kHost, {4});
  Outcome o = outcome(api()->fill(acc, &on_host, 1.0, nullptr));
  EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(o.message,
            "fill: x is on cpu:0; the cuda accelerator's kernels take tensors in CUDA device memory only "
            "(copy host data to a cuda device first)");

  auto* fake = reinterpret_cast<void*>(uintptr_t{1} << 40);  // never dereferenced: every case fails first
  PL_Tensor y = tensor(fake, PL_F32, {PL_DEVICE_CUDA, 0}, {4});
  PL_Tensor x = tensor(static_cast<char*>(fake) + 4096, PL_F32, {PL_DEVICE_CUDA, 1}, {4});
  o = outcome(api()->axpy(acc, &y, 1.0, &x, nullptr));
  EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(o.message, "axpy: y is on cuda:0 but x is on cuda:1; the tensors of one call must be on the same device");

  PL_Tensor far = tensor(fake, PL_F32, {PL_DEVICE_CUDA, 4096}, {4});
  o = outcome(api()->scale(acc, &far, 2.0, nullptr));
  EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("scale: x is on cuda:4096 but "), std::string::npos) << o.message;

  if (!gpu_available()) {  // a valid call: the missing device is the error, with the reason
    PL_Tensor ok_tensor = tensor(fake, PL_F32, kGpu, {4});
    o = outcome(api()->scale(acc, &ok_tensor, 2.0, nullptr));
    EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(o.message, "scale: x is on cuda:0 but no CUDA device is available: " + cuda().unavailable_reason());
  }
}

// ---- the cpu reference's argument checks, message for message ----

namespace {

// Builds one side's tensors: the cpu side over a host arena, the cuda side at a fake device
// address with the same layout (so overlaps match).  Each new tensor gets its own 1 KiB.
struct Side {
  bool on_cuda;
  uint8_t* base;
  size_t next = 0;
  PL_Tensor t(PL_DType d, std::vector<int64_t> shape) {
    const size_t at = next;
    next += 1024;
    return at_offset(at, d, std::move(shape));
  }
  PL_Tensor at_offset(size_t offset, PL_DType d, std::vector<int64_t> shape) {
    return tensor(base + offset, d, on_cuda ? kGpu : kHost, std::move(shape));
  }
};

struct Case {
  const char* name;
  std::function<Outcome(Side&)> call;
};

#define BOTH(cpu_call, cuda_call) (s.on_cuda ? outcome(cuda_call) : cpu_outcome([&] { cpu_call; }))

PL_Accelerator* acc() { return cuda().get(); }

PL_SgdParams sgd(double lr, double momentum, double dampening, double wd, int nesterov) {
  return {sizeof(PL_SgdParams), lr, momentum, dampening, wd, nesterov, 0};
}
PL_AdamParams adam(double lr, double b1, double b2, double eps, int64_t step) {
  return {sizeof(PL_AdamParams), lr, b1, b2, eps, 0.0, step, 0, 0, 0};
}

std::vector<Case> cases() {
  return {
      {"fill int not whole",
       [](Side& s) {
         auto x = s.t(PL_I32, {4});
         return BOTH(plrt::cpu::fill(&x, 1.5), api()->fill(acc(), &x, 1.5, nullptr));
       }},
      {"fill u8 out of range",
       [](Side& s) {
         auto x = s.t(PL_U8, {4});
         return BOTH(plrt::cpu::fill(&x, 256), api()->fill(acc(), &x, 256, nullptr));
       }},
      {"fill bad dtype",
       [](Side& s) {
         auto x = s.t(PL_F32, {4});
         x.dtype = 42;
         return BOTH(plrt::cpu::fill(&x, 1), api()->fill(acc(), &x, 1, nullptr));
       }},
      {"fill negative numel",
       [](Side& s) {
         auto x = s.t(PL_F32, {4});
         x.numel = -3;
         return BOTH(plrt::cpu::fill(&x, 1), api()->fill(acc(), &x, 1, nullptr));
       }},
      {"fill small struct",
       [](Side& s) {
         auto x = s.t(PL_F32, {4});
         x.struct_size = 8;
         return BOTH(plrt::cpu::fill(&x, 1), api()->fill(acc(), &x, 1, nullptr));
       }},
      {"scale i64 fraction",
       [](Side& s) {
         auto x = s.t(PL_I64, {4});
         return BOTH(plrt::cpu::scale(&x, 0.5), api()->scale(acc(), &x, 0.5, nullptr));
       }},
      {"scale i32 huge",
       [](Side& s) {
         auto x = s.t(PL_I32, {4});
         return BOTH(plrt::cpu::scale(&x, 1e19), api()->scale(acc(), &x, 1e19, nullptr));
       }},
      {"axpy dtypes",
       [](Side& s) {
         auto y = s.t(PL_F32, {4});
         auto x = s.t(PL_F64, {4});
         return BOTH(plrt::cpu::axpy(&y, 1, &x), api()->axpy(acc(), &y, 1, &x, nullptr));
       }},
      {"axpy counts",
       [](Side& s) {
         auto y = s.t(PL_F16, {4});
         auto x = s.t(PL_F16, {5});
         return BOTH(plrt::cpu::axpy(&y, 1, &x), api()->axpy(acc(), &y, 1, &x, nullptr));
       }},
      {"axpy NULL x",
       [](Side& s) {
         auto y = s.t(PL_F16, {4});
         return BOTH(plrt::cpu::axpy(&y, 1, nullptr), api()->axpy(acc(), &y, 1, nullptr, nullptr));
       }},
      {"cast int",
       [](Side& s) {
         auto d = s.t(PL_F32, {4});
         auto x = s.t(PL_I32, {4});
         return BOTH(plrt::cpu::cast(&d, &x), api()->cast(acc(), &d, &x, nullptr));
       }},
      {"cast counts",
       [](Side& s) {
         auto d = s.t(PL_BF16, {4});
         auto x = s.t(PL_F64, {3});
         return BOTH(plrt::cpu::cast(&d, &x), api()->cast(acc(), &d, &x, nullptr));
       }},
      {"sgd NULL params",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         return BOTH(plrt::cpu::sgd_step(&p, &g, nullptr, nullptr),
                     api()->sgd_step(acc(), &p, &g, nullptr, nullptr, nullptr));
       }},
      {"sgd negative lr",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto h = sgd(-1, 0, 0, 0, 0);
         return BOTH(plrt::cpu::sgd_step(&p, &g, nullptr, &h), api()->sgd_step(acc(), &p, &g, nullptr, &h, nullptr));
       }},
      {"sgd nesterov dampening",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto b = s.t(PL_F32, {4});
         auto h = sgd(0.1, 0.9, 0.5, 0, 1);
         return BOTH(plrt::cpu::sgd_step(&p, &g, &b, &h), api()->sgd_step(acc(), &p, &g, &b, &h, nullptr));
       }},
      {"sgd no buffer",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto h = sgd(0.1, 0.9, 0, 0, 0);
         return BOTH(plrt::cpu::sgd_step(&p, &g, nullptr, &h), api()->sgd_step(acc(), &p, &g, nullptr, &h, nullptr));
       }},
      {"sgd int param",
       [](Side& s) {
         auto p = s.t(PL_I32, {4});
         auto g = s.t(PL_I32, {4});
         auto h = sgd(0.1, 0, 0, 0, 0);
         return BOTH(plrt::cpu::sgd_step(&p, &g, nullptr, &h), api()->sgd_step(acc(), &p, &g, nullptr, &h, nullptr));
       }},
      {"sgd buffer dtype",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto b = s.t(PL_F16, {4});
         auto h = sgd(0.1, 0.9, 0, 0, 0);
         return BOTH(plrt::cpu::sgd_step(&p, &g, &b, &h), api()->sgd_step(acc(), &p, &g, &b, &h, nullptr));
       }},
      {"adam beta1 1",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto m = s.t(PL_F32, {4});
         auto v = s.t(PL_F32, {4});
         auto h = adam(1e-3, 1.0, 0.999, 1e-8, 1);
         return BOTH(plrt::cpu::adam_step(&p, &g, &m, &v, &h), api()->adam_step(acc(), &p, &g, &m, &v, &h, nullptr));
       }},
      {"adam step 0",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto m = s.t(PL_F32, {4});
         auto v = s.t(PL_F32, {4});
         auto h = adam(1e-3, 0.9, 0.999, 1e-8, 0);
         return BOTH(plrt::cpu::adam_step(&p, &g, &m, &v, &h), api()->adam_step(acc(), &p, &g, &m, &v, &h, nullptr));
       }},
      {"adam eps nan",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto m = s.t(PL_F32, {4});
         auto v = s.t(PL_F32, {4});
         auto h = adam(1e-3, 0.9, 0.999, NAN, 1);
         return BOTH(plrt::cpu::adam_step(&p, &g, &m, &v, &h), api()->adam_step(acc(), &p, &g, &m, &v, &h, nullptr));
       }},
      {"adam exp_avg_sq count",
       [](Side& s) {
         auto p = s.t(PL_BF16, {4});
         auto g = s.t(PL_BF16, {4});
         auto m = s.t(PL_BF16, {4});
         auto v = s.t(PL_BF16, {2});
         auto h = adam(1e-3, 0.9, 0.999, 1e-8, 1);
         return BOTH(plrt::cpu::adam_step(&p, &g, &m, &v, &h), api()->adam_step(acc(), &p, &g, &m, &v, &h, nullptr));
       }},
      {"adam small params",
       [](Side& s) {
         auto p = s.t(PL_F32, {4});
         auto g = s.t(PL_F32, {4});
         auto m = s.t(PL_F32, {4});
         auto v = s.t(PL_F32, {4});
         auto h = adam(1e-3, 0.9, 0.999, 1e-8, 1);
         h.struct_size = 16;
         return BOTH(plrt::cpu::adam_step(&p, &g, &m, &v, &h), api()->adam_step(acc(), &p, &g, &m, &v, &h, nullptr));
       }},
      {"quantize src f64",
       [](Side& s) {
         auto x = s.t(PL_F64, {8});
         auto q = s.t(PL_U8, {8});
         auto mm = s.t(PL_F32, {4});
         return BOTH(plrt::cpu::quantize_u8(&x, &q, &mm, 4), api()->quantize_u8(acc(), &x, &q, &mm, 4, nullptr));
       }},
      {"quantize q f32",
       [](Side& s) {
         auto x = s.t(PL_F32, {8});
         auto q = s.t(PL_F32, {8});
         auto mm = s.t(PL_F32, {4});
         return BOTH(plrt::cpu::quantize_u8(&x, &q, &mm, 4), api()->quantize_u8(acc(), &x, &q, &mm, 4, nullptr));
       }},
      {"quantize chunk 0",
       [](Side& s) {
         auto x = s.t(PL_F16, {8});
         auto q = s.t(PL_U8, {8});
         auto mm = s.t(PL_F32, {4});
         return BOTH(plrt::cpu::quantize_u8(&x, &q, &mm, 0), api()->quantize_u8(acc(), &x, &q, &mm, 0, nullptr));
       }},
      {"quantize minmax count",
       [](Side& s) {
         auto x = s.t(PL_F32, {9});
         auto q = s.t(PL_U8, {9});
         auto mm = s.t(PL_F32, {4});
         return BOTH(plrt::cpu::quantize_u8(&x, &q, &mm, 4), api()->quantize_u8(acc(), &x, &q, &mm, 4, nullptr));
       }},
      {"dequantize minmax f64",
       [](Side& s) {
         auto q = s.t(PL_U8, {8});
         auto mm = s.t(PL_F64, {4});
         auto d = s.t(PL_F32, {8});
         return BOTH(plrt::cpu::dequantize_u8(&q, &mm, &d, 4), api()->dequantize_u8(acc(), &q, &mm, &d, 4, nullptr));
       }},
      {"dequantize dst i64",
       [](Side& s) {
         auto q = s.t(PL_U8, {8});
         auto mm = s.t(PL_F32, {4});
         auto d = s.t(PL_I64, {8});
         return BOTH(plrt::cpu::dequantize_u8(&q, &mm, &d, 4), api()->dequantize_u8(acc(), &q, &mm, &d, 4, nullptr));
       }},
      {"gemm trans 2",
       [](Side& s) {
         auto a = s.t(PL_F32, {2, 3});
         auto b = s.t(PL_F32, {3, 2});
         auto c = s.t(PL_F32, {2, 2});
         return BOTH(plrt::cpu::gemm(2, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 2, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm inner",
       [](Side& s) {
         auto a = s.t(PL_F16, {2, 3});
         auto b = s.t(PL_F16, {4, 2});
         auto c = s.t(PL_F16, {2, 2});
         return BOTH(plrt::cpu::gemm(0, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 0, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm c shape",
       [](Side& s) {
         auto a = s.t(PL_F64, {3, 2});
         auto b = s.t(PL_F64, {3, 4});
         auto c = s.t(PL_F64, {2, 3});
         return BOTH(plrt::cpu::gemm(1, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 1, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm ndim",
       [](Side& s) {
         auto a = s.t(PL_F32, {6});
         auto b = s.t(PL_F32, {3, 2});
         auto c = s.t(PL_F32, {2, 2});
         return BOTH(plrt::cpu::gemm(0, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 0, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm shape vs numel",
       [](Side& s) {
         auto a = s.t(PL_F32, {2, 3});
         a.numel = 7;
         auto b = s.t(PL_F32, {3, 2});
         auto c = s.t(PL_F32, {2, 2});
         return BOTH(plrt::cpu::gemm(0, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 0, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm int",
       [](Side& s) {
         auto a = s.t(PL_I32, {2, 3});
         auto b = s.t(PL_I32, {3, 2});
         auto c = s.t(PL_I32, {2, 2});
         return BOTH(plrt::cpu::gemm(0, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 0, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm mixed dtypes",
       [](Side& s) {
         auto a = s.t(PL_BF16, {2, 3});
         auto b = s.t(PL_F16, {3, 2});
         auto c = s.t(PL_BF16, {2, 2});
         return BOTH(plrt::cpu::gemm(0, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 0, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"gemm c overlaps a",
       [](Side& s) {
         auto a = s.at_offset(0, PL_F32, {2, 3});
         auto b = s.at_offset(512, PL_F32, {3, 2});
         auto c = s.at_offset(8, PL_F32, {2, 2});
         return BOTH(plrt::cpu::gemm(0, 0, 1, &a, &b, 0, &c), api()->gemm(acc(), 0, 0, 1, &a, &b, 0, &c, nullptr));
       }},
      {"add_bias length",
       [](Side& s) {
         auto y = s.t(PL_F16, {2, 3});
         auto b = s.t(PL_F16, {2});
         return BOTH(plrt::cpu::add_bias(&y, &b), api()->add_bias(acc(), &y, &b, nullptr));
       }},
      {"add_bias bias ndim",
       [](Side& s) {
         auto y = s.t(PL_F32, {2, 3});
         auto b = s.t(PL_F32, {1, 3});
         return BOTH(plrt::cpu::add_bias(&y, &b), api()->add_bias(acc(), &y, &b, nullptr));
       }},
      {"sum_rows out length",
       [](Side& s) {
         auto x = s.t(PL_BF16, {4, 3});
         auto o = s.t(PL_BF16, {4});
         return BOTH(plrt::cpu::sum_rows(1, &x, 0, &o), api()->sum_rows(acc(), 1, &x, 0, &o, nullptr));
       }},
      {"sum_rows out dtype",
       [](Side& s) {
         auto x = s.t(PL_F32, {4, 3});
         auto o = s.t(PL_F64, {3});
         return BOTH(plrt::cpu::sum_rows(1, &x, 0, &o), api()->sum_rows(acc(), 1, &x, 0, &o, nullptr));
       }},
      {"relu shapes",
       [](Side& s) {
         auto x = s.t(PL_F32, {2, 3});
         auto y = s.t(PL_F32, {3, 2});
         return BOTH(plrt::cpu::relu(&x, &y), api()->relu(acc(), &x, &y, nullptr));
       }},
      {"relu partial overlap",
       [](Side& s) {
         auto x = s.at_offset(0, PL_F32, {4});
         auto y = s.at_offset(4, PL_F32, {4});
         return BOTH(plrt::cpu::relu(&x, &y), api()->relu(acc(), &x, &y, nullptr));
       }},
      {"relu ndim 9",
       [](Side& s) {
         auto x = s.t(PL_F32, {4});
         x.ndim = 9;
         auto y = s.t(PL_F32, {4});
         return BOTH(plrt::cpu::relu(&x, &y), api()->relu(acc(), &x, &y, nullptr));
       }},
      {"relu u8",
       [](Side& s) {
         auto x = s.t(PL_U8, {4});
         auto y = s.t(PL_U8, {4});
         return BOTH(plrt::cpu::relu(&x, &y), api()->relu(acc(), &x, &y, nullptr));
       }},
      {"relu_backward dx is y",
       [](Side& s) {
         auto y = s.at_offset(0, PL_F32, {4});
         auto dy = s.at_offset(1024, PL_F32, {4});
         auto dx = s.at_offset(0, PL_F32, {4});
         return BOTH(plrt::cpu::relu_backward(&y, &dy, &dx), api()->relu_backward(acc(), &y, &dy, &dx, nullptr));
       }},
      {"cross_entropy labels i32",
       [](Side& s) {
         auto x = s.t(PL_F32, {2, 3});
         auto l = s.t(PL_I32, {2});
         auto loss = s.t(PL_F32, {2});
         return BOTH(plrt::cpu::cross_entropy(&x, &l, &loss, nullptr, 1),
                     api()->cross_entropy(acc(), &x, &l, &loss, nullptr, 1, nullptr));
       }},
      {"cross_entropy f16",
       [](Side& s) {
         auto x = s.t(PL_F16, {2, 3});
         auto l = s.t(PL_I64, {2});
         auto loss = s.t(PL_F16, {2});
         return BOTH(plrt::cpu::cross_entropy(&x, &l, &loss, nullptr, 1),
                     api()->cross_entropy(acc(), &x, &l, &loss, nullptr, 1, nullptr));
       }},
      {"cross_entropy loss length",
       [](Side& s) {
         auto x = s.t(PL_F64, {2, 3});
         auto l = s.t(PL_I64, {2});
         auto loss = s.t(PL_F64, {3});
         return BOTH(plrt::cpu::cross_entropy(&x, &l, &loss, nullptr, 1),
                     api()->cross_entropy(acc(), &x, &l, &loss, nullptr, 1, nullptr));
       }},
      {"cross_entropy grad shape",
       [](Side& s) {
         auto x = s.t(PL_F32, {2, 3});
         auto l = s.t(PL_I64, {2});
         auto loss = s.t(PL_F32, {2});
         auto g = s.t(PL_F32, {3, 2});
         return BOTH(plrt::cpu::cross_entropy(&x, &l, &loss, &g, 1),
                     api()->cross_entropy(acc(), &x, &l, &loss, &g, 1, nullptr));
       }},
      {"argmax empty rows",
       [](Side& s) {
         auto x = s.t(PL_F32, {3, 0});
         x.data = nullptr;
         auto o = s.t(PL_I64, {3});
         return BOTH(plrt::cpu::argmax_rows(&x, &o), api()->argmax_rows(acc(), &x, &o, nullptr));
       }},
      {"argmax out i32",
       [](Side& s) {
         auto x = s.t(PL_F32, {3, 2});
         auto o = s.t(PL_I32, {3});
         return BOTH(plrt::cpu::argmax_rows(&x, &o), api()->argmax_rows(acc(), &x, &o, nullptr));
       }},
      {"unscale found_inf count",
       [](Side& s) {
         auto x = s.t(PL_F16, {4});
         auto f = s.t(PL_F32, {2});
         return BOTH(plrt::cpu::unscale_check(&x, 0.5, &f), api()->unscale_check(acc(), &x, 0.5, &f, nullptr));
       }},
      {"unscale found_inf f64",
       [](Side& s) {
         auto x = s.t(PL_F32, {4});
         auto f = s.t(PL_F64, {1});
         return BOTH(plrt::cpu::unscale_check(&x, 0.5, &f), api()->unscale_check(acc(), &x, 0.5, &f, nullptr));
       }},
      {"unscale inv inf",
       [](Side& s) {
         auto x = s.t(PL_F64, {4});
         auto f = s.t(PL_F32, {1});
         return BOTH(plrt::cpu::unscale_check(&x, INFINITY, &f),
                     api()->unscale_check(acc(), &x, INFINITY, &f, nullptr));
       }},
      {"unscale inv beyond float",
       [](Side& s) {
         auto x = s.t(PL_BF16, {4});
         auto f = s.t(PL_F32, {1});
         return BOTH(plrt::cpu::unscale_check(&x, 1e300, &f), api()->unscale_check(acc(), &x, 1e300, &f, nullptr));
       }},
      {"unscale int",
       [](Side& s) {
         auto x = s.t(PL_I64, {4});
         auto f = s.t(PL_F32, {1});
         return BOTH(plrt::cpu::unscale_check(&x, 0.5, &f), api()->unscale_check(acc(), &x, 0.5, &f, nullptr));
       }},
      {"unscale flag inside x",
       [](Side& s) {
         auto x = s.at_offset(0, PL_F32, {4});
         auto f = s.at_offset(8, PL_F32, {1});
         return BOTH(plrt::cpu::unscale_check(&x, 0.5, &f), api()->unscale_check(acc(), &x, 0.5, &f, nullptr));
       }},
  };
}

}  // namespace

TEST(CudaPlugin, ArgumentErrorsMatchTheCpuReference) {
  alignas(64) static uint8_t arena[64 * 1024];
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t{1} << 40);  // device side: never dereferenced
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Side cpu_side{false, arena};
    const Outcome want = c.call(cpu_side);
    ASSERT_NE(want.code, PL_ERR_OK) << "the case is valid on the cpu; it must fail its checks";
    Side cuda_side{true, fake};
    const Outcome got = c.call(cuda_side);
    EXPECT_EQ(got.code, want.code) << got.message;
    EXPECT_EQ(got.message, want.message);
  }
}
