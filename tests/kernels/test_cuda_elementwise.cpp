// fill, scale, axpy, cast and unscale_check on the GPU against the cpu reference kernels, bit for
// bit (NaN payloads aside), at sizes 0, 1, 7, 1000 and 2^20 + 3, for every dtype each takes, on
// 16-byte aligned buffers (the packed path) and on buffers one element off (the scalar path).
#include "test_cuda_support.hpp"

using namespace cuda_test;

namespace {

const PL_DType kAll[] = {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8};
const PL_DType kFloats[] = {PL_F32, PL_F64, PL_F16, PL_BF16};

std::vector<int64_t> offsets_for(int64_t n) {
  return n > 100000 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1};
}

// A stream of our own for some calls (the kernels must honour it), else the default stream.
struct Stream {
  PL_Stream* s = nullptr;
  explicit Stream(bool own) {
    if (own) ok(api()->stream_create(cuda().get(), kGpu, &s));
  }
  ~Stream() {
    if (s) api()->stream_destroy(cuda().get(), s);
  }
  void sync() { ok(api()->stream_synchronize(cuda().get(), s)); }
};

// x = f(x) on the GPU and with the cpu reference; the results must be the same.
template <class Gpu, class Cpu>
void expect_same_inplace(const Host& input, int64_t offset, bool own_stream, Gpu gpu, Cpu cpu) {
  Dev d(input, offset);
  Stream st(own_stream);
  PL_Tensor td = d.t();
  ok(gpu(td, st.s));
  st.sync();
  Host want = input;
  PL_Tensor th = want.t();
  cpu(th);
  EXPECT_TRUE(same_elements(d.download(), want));
}

}  // namespace

TEST(CudaElementwise, FillMatchesCpu) {
  REQUIRE_GPU();
  for (PL_DType dt : kAll) {
    const std::vector<double> values = is_float(dt)  ? std::vector<double>{0.1, -3.5e38, 1e-8, 70000.5, NAN, -0.0}
                                       : dt == PL_U8 ? std::vector<double>{0, 7, 255}
                                                     : std::vector<double>{-5, 0, 2147483647};
    for (int64_t n : sizes())
      for (int64_t off : offsets_for(n))
        for (double v : values) {
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                       " value=" + std::to_string(v));
          expect_same_inplace(
              random_host(dt, n, 1), off, n == 1000,
              [&](PL_Tensor& t, PL_Stream* s) { return api()->fill(cuda().get(), &t, v, s); },
              [&](PL_Tensor& t) { plrt::cpu::fill(&t, v); });
        }
  }
}

TEST(CudaElementwise, ScaleMatchesCpu) {
  REQUIRE_GPU();
  for (PL_DType dt : kAll) {
    const std::vector<double> alphas =
        is_float(dt) ? std::vector<double>{0.3, -2.5, 1e30} : std::vector<double>{3, -7, 0x1p40 + 1};
    for (int64_t n : sizes())
      for (int64_t off : offsets_for(n))
        for (double a : alphas) {
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                       " alpha=" + std::to_string(a));
          Host x = random_host(dt, n, 2, -300, 300);
          plant_specials(x, true);
          expect_same_inplace(
              x, off, n == 7, [&](PL_Tensor& t, PL_Stream* s) { return api()->scale(cuda().get(), &t, a, s); },
              [&](PL_Tensor& t) { plrt::cpu::scale(&t, a); });
        }
  }
}

TEST(CudaElementwise, AxpyMatchesCpu) {
  REQUIRE_GPU();
  for (PL_DType dt : kAll) {
    const double alpha = is_float(dt) ? -1.25 : -3;
    for (int64_t n : sizes())
      for (int64_t off : offsets_for(n)) {
        SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off));
        Host y = random_host(dt, n, 3), x = random_host(dt, n, 4);
        plant_specials(x, true);
        Dev dx(x, 0);  // x aligned while y is offset: the packed path needs both aligned
        expect_same_inplace(
            y, off, n == 1000,
            [&](PL_Tensor& t, PL_Stream* s) {
              PL_Tensor tx = dx.t();
              return api()->axpy(cuda().get(), &t, alpha, &tx, s);
            },
            [&](PL_Tensor& t) {
              PL_Tensor tx = x.t();
              plrt::cpu::axpy(&t, alpha, &tx);
            });
      }
  }
}

TEST(CudaElementwise, CastMatchesCpuForEveryPair) {
  REQUIRE_GPU();
  for (PL_DType from : kFloats)
    for (PL_DType to : kFloats)
      for (int64_t n : sizes())
        for (int64_t off : offsets_for(n)) {
          SCOPED_TRACE(std::string(pl_dtype_name(from)) + " -> " + pl_dtype_name(to) + " n=" + std::to_string(n) +
                       " offset=" + std::to_string(off));
          // Wide values: overflow to inf in f16, subnormals, rounding ties of every narrow type.
          Host src = random_host(from, n, 5, -70000, 70000);
          for (int64_t i = 0; i < n; i += 5) set_value(src, i, value_at(src, i) * 1e-9);
          plant_specials(src, true);
          Dev ds(src, off);
          Dev dd(to, n, off);
          PL_Tensor ts = ds.t(), td = dd.t();
          ok(api()->cast(cuda().get(), &td, &ts, nullptr));
          Host want(to, n);
          PL_Tensor hs = src.t(), hd = want.t();
          plrt::cpu::cast(&hd, &hs);
          EXPECT_TRUE(same_elements(dd.download(), want));
        }
}

TEST(CudaElementwise, CastCopiesOverlappingBuffersLikeMemmove) {
  REQUIRE_GPU();
  const int64_t n = 1000;
  Host h = random_host(PL_F32, n + 10, 6);
  Dev d(h);
  PL_Tensor src = tensor(d.data(), PL_F32, kGpu, {n});
  PL_Tensor dst = tensor(static_cast<float*>(d.data()) + 10, PL_F32, kGpu, {n});
  ok(api()->cast(cuda().get(), &dst, &src, nullptr));
  Host want = h;
  std::memmove(want.as<float>() + 10, h.as<float>(), n * sizeof(float));
  EXPECT_TRUE(same_elements(d.download(), want));
}

TEST(CudaElementwise, UnscaleCheckMatchesCpuAndOnlySetsTheFlag) {
  REQUIRE_GPU();
  for (PL_DType dt : kFloats)
    for (int64_t n : sizes())
      for (int64_t off : offsets_for(n))
        for (int variant = 0; variant < 3; ++variant) {  // finite; one inf or NaN; finite with the flag already set
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                       " variant=" + std::to_string(variant));
          Host x = random_host(dt, n, 7, -6e4, 6e4);
          plant_specials(x, false);
          if (variant == 1 && n > 0) set_value(x, n / 2, n % 2 ? NAN : -INFINITY);
          const float initial = variant == 2 ? 1.0f : 0.0f;
          Host flag(PL_F32, 1);
          *flag.as<float>() = initial;
          Dev dx(x, off), df(flag);
          PL_Tensor tx = dx.t(), tf = df.t();
          const double inv = 1.0 / 65536.0;
          ok(api()->unscale_check(cuda().get(), &tx, inv, &tf, nullptr));
          Host want = x, want_flag = flag;
          PL_Tensor hx = want.t(), hf = want_flag.t();
          plrt::cpu::unscale_check(&hx, inv, &hf);
          EXPECT_TRUE(same_elements(dx.download(), want));
          const float got_flag = *df.download().as<float>();
          EXPECT_EQ(got_flag, *want_flag.as<float>());
          EXPECT_EQ(got_flag, variant == 0 || (variant == 1 && n == 0) ? 0.0f : 1.0f);
        }
}

TEST(CudaElementwise, ZeroElementsTouchNothing) {
  REQUIRE_GPU();
  PL_Tensor empty = tensor(nullptr, PL_F32, kGpu, {0});
  ok(api()->fill(cuda().get(), &empty, 1.0, nullptr));
  ok(api()->scale(cuda().get(), &empty, 2.0, nullptr));
  ok(api()->axpy(cuda().get(), &empty, 2.0, &empty, nullptr));
  ok(api()->cast(cuda().get(), &empty, &empty, nullptr));
  cuda().synchronize();
}
