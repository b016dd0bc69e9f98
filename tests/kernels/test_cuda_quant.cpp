// quantize_u8 / dequantize_u8 on the GPU against the cpu reference, bit for bit, for every chunk
// layout the kernels distinguish (one thread per chunk up to a whole block, chunks longer than the
// registers hold, a last chunk cut short, packed and scalar access), and their data errors, which
// the next synchronisation reports with the cpu reference's message.
#include "test_cuda_support.hpp"

using namespace cuda_test;

namespace {

const PL_DType kQuant[] = {PL_F32, PL_F16, PL_BF16};

int64_t chunks_of(int64_t n, int64_t cs) { return n / cs + (n % cs != 0); }

// src with a constant chunk (scale 0) at the start and a tiny range (scale near underflow) next.
Host quant_input(PL_DType dt, int64_t n, int64_t cs, uint32_t seed) {
  Host h = random_host(dt, n, seed, -50, 50);
  for (int64_t i = 0; i < std::min(cs, n); ++i) set_value(h, i, 2.5);
  for (int64_t i = cs; i < std::min(2 * cs, n); ++i) set_value(h, i, i % 2 ? 1e-30 : 1.5e-30);
  return h;
}

std::vector<int64_t> chunk_sizes(int64_t n) {
  std::vector<int64_t> cs = {1, 3, 4, 16, 100, 2048, 4097, 5000};
  if (n > 0) cs.push_back(n);
  return cs;
}

}  // namespace

TEST(CudaQuant, QuantizeAndDequantizeMatchCpu) {
  REQUIRE_GPU();
  for (PL_DType dt : kQuant)
    for (int64_t n : sizes())
      for (int64_t cs : chunk_sizes(n))
        for (int64_t off : {0, 1}) {
          if (n > 100000 && (off != 0 || cs < 100)) continue;  // the big size: the common layouts
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " chunk=" + std::to_string(cs) +
                       " offset=" + std::to_string(off));
          const int64_t chunks = chunks_of(n, cs);
          Host src = quant_input(dt, n, cs, 41);
          Host q(PL_U8, n), mm(PL_F32, 2 * chunks);
          PL_Tensor hs = src.t(), hq = q.t(), hm = mm.t();
          plrt::cpu::quantize_u8(&hs, &hq, &hm, cs);

          Dev ds(src, off), dq(PL_U8, n, off), dm(PL_F32, 2 * chunks);
          PL_Tensor ts = ds.t(), tq = dq.t(), tm = dm.t();
          ok(api()->quantize_u8(cuda().get(), &ts, &tq, &tm, cs, nullptr));
          ok(api()->stream_synchronize(cuda().get(), nullptr));  // reports any error the kernel found
          EXPECT_TRUE(same_elements(dq.download(), q));
          EXPECT_TRUE(same_elements(dm.download(), mm));

          // Back, from the cpu's q and minmax (already on the device and equal, if the above passed).
          Host back(dt, n);
          PL_Tensor hb = back.t();
          plrt::cpu::dequantize_u8(&hq, &hm, &hb, cs);
          dq.upload(q);
          dm.upload(mm);
          Dev db(dt, n, off);
          PL_Tensor tb = db.t();
          ok(api()->dequantize_u8(cuda().get(), &tq, &tm, &tb, cs, nullptr));
          ok(api()->stream_synchronize(cuda().get(), nullptr));
          EXPECT_TRUE(same_elements(db.download(), back));
        }
}

namespace {

// The error the cpu reference gives for the same call, with the GPU's note on when it was found.
std::string deferred(const std::string& cpu_message, const char* where) {
  return cpu_message + " (found on the GPU after the call returned; reported at " + where + ")";
}

}  // namespace

TEST(CudaQuant, DataErrorsAreReportedAtTheNextSynchronisation) {
  REQUIRE_GPU();
  PL_Accelerator* acc = cuda().get();
  const int64_t n = 3000, cs = 1000;
  struct Bad {
    const char* name;
    std::function<void(Host&)> plant;
  };
  const Bad bads[] = {
      {"inf", [](Host& h) { set_value(h, 1234, INFINITY); }},
      {"nan before a range error",
       [](Host& h) {
         set_value(h, 2500, -1e38);
         set_value(h, 2501, 3e38);
         set_value(h, 1999, NAN);
       }},
      {"range",
       [](Host& h) {
         set_value(h, 10, -3e38);
         set_value(h, 20, 3e38);
         set_value(h, 2999, -INFINITY);
       }},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.name);
    Host src = random_host(PL_F32, n, 51);
    b.plant(src);
    Host q(PL_U8, n), mm(PL_F32, 6);
    PL_Tensor hs = src.t(), hq = q.t(), hm = mm.t();
    const Outcome want = cpu_outcome([&] { plrt::cpu::quantize_u8(&hs, &hq, &hm, cs); });
    ASSERT_EQ(want.code, PL_ERR_INVALID_ARGUMENT);

    Dev ds(src), dq(PL_U8, n), dm(PL_F32, 6);
    PL_Tensor ts = ds.t(), tq = dq.t(), tm = dm.t();
    ok(api()->quantize_u8(acc, &ts, &tq, &tm, cs, nullptr));  // asynchronous: no error yet
    const Outcome got = outcome(api()->stream_synchronize(acc, nullptr));
    EXPECT_EQ(got.code, PL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(got.message, deferred(want.message, "stream_synchronize"));
    ok(api()->stream_synchronize(acc, nullptr));  // reported once
  }
}

TEST(CudaQuant, DequantizeErrorsReachEventsAndCopies) {
  REQUIRE_GPU();
  PL_Accelerator* acc = cuda().get();
  const int64_t n = 40, cs = 10;
  Host q = random_host(PL_U8, n, 61);
  Host mm(PL_F32, 8);
  const float values[8] = {0, 1, -2, 2, 5, 4, NAN, 1};  // chunk 2: min > max; chunk 3: NaN
  std::memcpy(mm.data(), values, sizeof values);
  Host dst(PL_F32, n);
  PL_Tensor hq = q.t(), hm = mm.t(), hd = dst.t();
  const Outcome want = cpu_outcome([&] { plrt::cpu::dequantize_u8(&hq, &hm, &hd, cs); });
  ASSERT_EQ(want.code, PL_ERR_INVALID_ARGUMENT);

  Dev dq(q), dm(mm), dd(PL_F32, n);
  PL_Tensor tq = dq.t(), tm = dm.t(), td = dd.t();
  PL_Event* ev = nullptr;
  ok(api()->event_create(acc, kGpu, &ev));
  ok(api()->dequantize_u8(acc, &tq, &tm, &td, cs, nullptr));
  ok(api()->event_record(acc, ev, nullptr));
  Outcome got = outcome(api()->event_synchronize(acc, ev));
  EXPECT_EQ(got.message, deferred(want.message, "event_synchronize"));
  ok(api()->event_destroy(acc, ev));

  // A copy on the default stream waits, and so reports too.
  ok(api()->dequantize_u8(acc, &tq, &tm, &td, cs, nullptr));
  Host out(PL_F32, n);
  got = outcome(api()->copy(acc, out.data(), kHost, dd.data(), kGpu, out.size(), nullptr));
  EXPECT_EQ(got.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(got.message, deferred(want.message, "copy"));
  // The valid chunks were written, as on the cpu (which stops at the bad chunk, after 0 and 1).
  for (int64_t i = 0; i < 2 * cs; ++i) EXPECT_EQ(out.as<float>()[i], dst.as<float>()[i]) << i;
}
