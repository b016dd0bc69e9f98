// The fused sgd_step and adam_step on the GPU against the cpu reference, bit for bit: every float
// dtype, sizes 0, 1, 7, 1000 and 2^20 + 3, aligned and misaligned, every option of each optimizer.
#include "test_cuda_support.hpp"

using namespace cuda_test;

namespace {

const PL_DType kFloats[] = {PL_F32, PL_F64, PL_F16, PL_BF16};

std::vector<int64_t> offsets_for(int64_t n) {
  return n > 100000 ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1};
}

PL_SgdParams sgd(double lr, double momentum, double dampening, double wd, bool nesterov, bool first) {
  return {sizeof(PL_SgdParams), lr, momentum, dampening, wd, nesterov ? 1 : 0, first ? 1 : 0};
}

}  // namespace

TEST(CudaOptim, SgdMatchesCpu) {
  REQUIRE_GPU();
  const PL_SgdParams configs[] = {
      sgd(0.1, 0, 0, 0, false, false),         // plain
      sgd(0.05, 0, 0, 1e-2, false, false),     // weight decay, no momentum
      sgd(0.1, 0.9, 0.1, 1e-3, false, true),   // momentum, first step (the buffer is only written)
      sgd(0.1, 0.9, 0.1, 1e-3, false, false),  // momentum, later step
      sgd(0.01, 0.8, 0, 0, true, false),       // nesterov
  };
  for (PL_DType dt : kFloats)
    for (const PL_SgdParams& p : configs)
      for (int64_t n : sizes())
        for (int64_t off : offsets_for(n)) {
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                       " momentum=" + std::to_string(p.momentum) + " first=" + std::to_string(p.first_step) +
                       " nesterov=" + std::to_string(p.nesterov));
          Host param = random_host(dt, n, 11), grad = random_host(dt, n, 12), buf = random_host(dt, n, 13);
          const bool momentum = p.momentum != 0;
          Dev dp(param, off), dg(grad, off), db(buf, off);
          PL_Tensor tp = dp.t(), tg = dg.t(), tb = db.t();
          ok(api()->sgd_step(cuda().get(), &tp, &tg, momentum ? &tb : nullptr, &p, nullptr));
          PL_Tensor hp = param.t(), hg = grad.t(), hb = buf.t();
          plrt::cpu::sgd_step(&hp, &hg, momentum ? &hb : nullptr, &p);
          EXPECT_TRUE(same_elements(dp.download(), param));
          EXPECT_TRUE(same_elements(db.download(), buf));  // untouched without momentum
        }
}

TEST(CudaOptim, AdamMatchesCpu) {
  REQUIRE_GPU();
  for (PL_DType dt : kFloats)
    for (int decoupled = 0; decoupled < 2; ++decoupled)
      for (double wd : {0.0, 0.01})
        for (int64_t n : sizes())
          for (int64_t off : offsets_for(n)) {
            SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " n=" + std::to_string(n) + " offset=" + std::to_string(off) +
                         " decoupled=" + std::to_string(decoupled) + " wd=" + std::to_string(wd));
            PL_AdamParams p{sizeof(PL_AdamParams), 1e-3, 0.9, 0.999, 1e-8, wd, 3, decoupled, 0, 0};
            Host param = random_host(dt, n, 21), grad = random_host(dt, n, 22);
            Host m = random_host(dt, n, 23, -0.1, 0.1), v = random_host(dt, n, 24, 0.0, 0.5);
            Dev dp(param, off), dg(grad, off), dm(m, off), dv(v, off);
            PL_Tensor tp = dp.t(), tg = dg.t(), tm = dm.t(), tv = dv.t();
            ok(api()->adam_step(cuda().get(), &tp, &tg, &tm, &tv, &p, nullptr));
            PL_Tensor hp = param.t(), hg = grad.t(), hm = m.t(), hv = v.t();
            plrt::cpu::adam_step(&hp, &hg, &hm, &hv, &p);
            EXPECT_TRUE(same_elements(dp.download(), param));
            EXPECT_TRUE(same_elements(dm.download(), m));
            EXPECT_TRUE(same_elements(dv.download(), v));
          }
}

TEST(CudaOptim, SgdOnAStreamOfItsOwn) {
  REQUIRE_GPU();
  const int64_t n = 4099;
  Host param = random_host(PL_F32, n, 31), grad = random_host(PL_F32, n, 32), buf = random_host(PL_F32, n, 33);
  Dev dp(param), dg(grad), db(buf);
  PL_Stream* s = nullptr;
  ok(api()->stream_create(cuda().get(), kGpu, &s));
  PL_SgdParams p = sgd(0.1, 0.9, 0, 0, false, false);
  PL_Tensor tp = dp.t(), tg = dg.t(), tb = db.t();
  for (int step = 0; step < 3; ++step) ok(api()->sgd_step(cuda().get(), &tp, &tg, &tb, &p, s));
  ok(api()->stream_synchronize(cuda().get(), s));
  ok(api()->stream_destroy(cuda().get(), s));
  PL_Tensor hp = param.t(), hg = grad.t(), hb = buf.t();
  for (int step = 0; step < 3; ++step) plrt::cpu::sgd_step(&hp, &hg, &hb, &p);
  EXPECT_TRUE(same_elements(dp.download(), param));
  EXPECT_TRUE(same_elements(db.download(), buf));
}
