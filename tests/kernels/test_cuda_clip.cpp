// ABI 1.5's gradient clipping kernels on the GPU: sum_squares against the cpu reference (within
// double rounding: the GPU adds in another fixed order) and bit for bit from one call to the next;
// clamp bit for bit against the cpu reference; at sizes 0, 1, 7, 1000 and 2^20 + 3, every float
// dtype, aligned and one element off.  The argument errors (which need no GPU) match the cpu
// reference's codes and messages.
#include "test_cuda_support.hpp"

using namespace cuda_test;

namespace {

const PL_DType kFloats[] = {PL_F32, PL_F64, PL_F16, PL_BF16};

PL_Accelerator* acc() { return cuda().get(); }

std::vector<int64_t> offsets_for(int64_t n) {
  return n > 100000 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1};
}

// A one-element f64 accumulator on the GPU holding `v`.
Host f64_host(double v) {
  Host h(PL_F64, 1);
  *h.as<double>() = v;
  return h;
}

// The cpu reference's sum of squares of `x` added to `start`.
double cpu_sum_squares(Host x, double start) {
  Host out = f64_host(start);
  PL_Tensor tx = x.t(), to = out.t();
  plrt::cpu::sum_squares(&tx, &to);
  return *out.as<double>();
}

}  // namespace

TEST(CudaClip, SumSquaresMatchesCpuAndRepeatsBitForBit) {
  REQUIRE_GPU();
  for (PL_DType dt : kFloats)
    for (int64_t n : sizes())
      for (int64_t off : offsets_for(n)) {
        SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off));
        Host x = random_host(dt, n, 11, -3, 3);
        Dev dx(x, off);
        Dev d1(f64_host(0.25)), d2(f64_host(0.25));
        PL_Tensor tx = dx.t(), t1 = d1.t(), t2 = d2.t();
        ok(api()->sum_squares(acc(), &tx, &t1, nullptr));
        ok(api()->sum_squares(acc(), &tx, &t2, nullptr));
        cuda().synchronize();
        const double got = *d1.download().as<double>(), again = *d2.download().as<double>();
        const double want = cpu_sum_squares(x, 0.25);
        EXPECT_EQ(bits_at(d1.download(), 0), bits_at(d2.download(), 0)) << got << " then " << again;
        // Every partial sum is <= want; each of the n + 1 additions rounds by at most 2^-53 of it.
        EXPECT_NEAR(got, want, static_cast<double>(n + 2) * 0x1p-52 * want);
        // out collects: a second call adds the same sum again.
        ok(api()->sum_squares(acc(), &tx, &t1, nullptr));
        cuda().synchronize();
        EXPECT_NEAR(*d1.download().as<double>(), 2 * want - 0.25, static_cast<double>(n + 2) * 0x1p-51 * want);
      }
}

TEST(CudaClip, SumSquaresWidensBeforeSquaringAndPropagatesNonFinite) {
  REQUIRE_GPU();
  for (PL_DType dt : kFloats) {
    SCOPED_TRACE(pl_dtype_name(dt));
    const double big = dt == PL_F16 ? 60000 : dt == PL_BF16 ? 1e38 : dt == PL_F32 ? 3e38 : 1e300;
    Host x(dt, 1000);
    for (int64_t i = 0; i < x.n; ++i) set_value(x, i, i % 2 ? -big : big);
    Dev dx(x);
    Dev out(f64_host(0));
    PL_Tensor tx = dx.t(), to = out.t();
    ok(api()->sum_squares(acc(), &tx, &to, nullptr));
    cuda().synchronize();
    const double got = *out.download().as<double>();
    if (dt == PL_F64) {
      EXPECT_EQ(got, INFINITY);  // 1e600 overflows double itself
    } else {
      const double v = value_at(x, 0);
      EXPECT_NEAR(got, 1000 * v * v, 1e-12 * 1000 * v * v);
    }
    set_value(x, 17, NAN);
    dx.upload(x);
    Dev out2(f64_host(0));
    PL_Tensor t2 = out2.t();
    ok(api()->sum_squares(acc(), &tx, &t2, nullptr));
    cuda().synchronize();
    EXPECT_TRUE(std::isnan(*out2.download().as<double>()));
  }
}

TEST(CudaClip, ClampMatchesCpuBitForBit) {
  REQUIRE_GPU();
  const std::pair<double, double> bounds[] = {{-0.1, 0.1}, {-1.0, 2.5}, {0.0, 0.0}, {-INFINITY, 0.3}, {-1e6, 1e6}};
  for (PL_DType dt : kFloats)
    for (int64_t n : sizes())
      for (int64_t off : offsets_for(n))
        for (const auto& [lo, hi] : bounds) {
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                       " [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
          Host x = random_host(dt, n, 13, -3, 3);
          plant_specials(x, true);
          Dev dx(x, off);
          PL_Tensor tx = dx.t();
          ok(api()->clamp(acc(), &tx, lo, hi, nullptr));
          Host want = x;
          PL_Tensor hx = want.t();
          plrt::cpu::clamp(&hx, lo, hi);
          EXPECT_TRUE(same_elements(dx.download(), want));
        }
}

TEST(CudaClip, ZeroElementsTouchNothing) {
  REQUIRE_GPU();
  Dev out(f64_host(3.5));
  PL_Tensor empty = tensor(nullptr, PL_F32, kGpu, {0}), to = out.t();
  ok(api()->sum_squares(acc(), &empty, &to, nullptr));
  ok(api()->clamp(acc(), &empty, -1, 1, nullptr));
  cuda().synchronize();
  EXPECT_EQ(*out.download().as<double>(), 3.5);
}

// ---- argument errors: the same code and message as the cpu reference, before any device work ----

TEST(CudaClip, ArgumentErrorsMatchTheCpuReference) {
  alignas(64) static uint8_t arena[16 * 1024];
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t{1} << 40);  // device side: never dereferenced
  struct Case {
    const char* name;
    PL_DType x_dtype;
    int64_t x_numel;
    PL_DType out_dtype;  // PL_DTYPE_INVALID: a clamp case
    int64_t out_numel;
    size_t out_offset;  // bytes past x's start
    double lo, hi;
  };
  const Case cases[] = {
      {"sum_squares out f32", PL_F32, 4, PL_F32, 1, 1024, 0, 0},
      {"sum_squares out numel 2", PL_F16, 4, PL_F64, 2, 1024, 0, 0},
      {"sum_squares out numel 0", PL_BF16, 4, PL_F64, 0, 1024, 0, 0},
      {"sum_squares out inside x", PL_F64, 4, PL_F64, 1, 8, 0, 0},
      {"sum_squares x int", PL_I32, 4, PL_F64, 1, 1024, 0, 0},
      {"clamp lo > hi", PL_F32, 4, PL_DTYPE_INVALID, 0, 0, 1, -1},
      {"clamp lo NaN", PL_F16, 4, PL_DTYPE_INVALID, 0, 0, NAN, 1},
      {"clamp hi NaN", PL_BF16, 4, PL_DTYPE_INVALID, 0, 0, -1, NAN},
      {"clamp x u8", PL_U8, 4, PL_DTYPE_INVALID, 0, 0, -1, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto call = [&](uint8_t* base, bool on_cuda) {
      const PL_Device dev = on_cuda ? kGpu : kHost;
      PL_Tensor x = tensor(base, c.x_dtype, dev, {c.x_numel});
      PL_Tensor out = tensor(base + c.out_offset, c.out_dtype, dev, {c.out_numel});
      if (c.out_dtype == PL_DTYPE_INVALID)
        return on_cuda ? outcome(api()->clamp(acc(), &x, c.lo, c.hi, nullptr))
                       : cpu_outcome([&] { plrt::cpu::clamp(&x, c.lo, c.hi); });
      return on_cuda ? outcome(api()->sum_squares(acc(), &x, &out, nullptr))
                     : cpu_outcome([&] { plrt::cpu::sum_squares(&x, &out); });
    };
    const Outcome want = call(arena, false);
    ASSERT_NE(want.code, PL_ERR_OK) << "the case is valid on the cpu; it must fail its checks";
    const Outcome got = call(fake, true);
    EXPECT_EQ(got.code, want.code) << got.message;
    EXPECT_EQ(got.message, want.message);
  }
  // The cuda rules' own: another device index, host memory.
  PL_Tensor x = tensor(fake, PL_F32, kGpu, {4});
  PL_Tensor out = tensor(fake + 1024, PL_F64, {PL_DEVICE_CUDA, 1}, {1});
  Outcome o = outcome(api()->sum_squares(acc(), &x, &out, nullptr));
  EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(o.message,
            "sum_squares: x is on cuda:0 but out is on cuda:1; the tensors of one call must be on the same device");
  std::vector<float> host(4);
  PL_Tensor on_host = tensor(host.data(), PL_F32, kHost, {4});
  o = outcome(api()->clamp(acc(), &on_host, -1, 1, nullptr));
  EXPECT_EQ(o.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("clamp: x is on cpu:0"), std::string::npos) << o.message;
}
