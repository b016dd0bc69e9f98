// The dense layers' math on the GPU against the cpu reference: gemm (cuBLAS) and sum_rows bit for
// bit on integer data (exact in any order) and within float rounding on reals, add_bias, relu,
// relu_backward and argmax_rows bit for bit, cross_entropy within a few ulps (CUDA's exp/log against glibc's), and a
// bad label reported by the next synchronisation with the cpu's message and nothing written.
#include <algorithm>

#include "test_cuda_support.hpp"

using namespace cuda_test;

namespace {

const PL_DType kFloats[] = {PL_F32, PL_F64, PL_F16, PL_BF16};

double eps_of_compute(PL_DType dt) { return dt == PL_F64 ? 0x1p-52 : 0x1p-23; }

// got vs want, where want[i] came from a sum of terms whose magnitudes add up to mag[i]: a
// different summation order moves it by at most terms * eps(C) * mag, and the final rounding to
// the dtype by one ulp more.
::testing::AssertionResult close_sums(const Host& got, const Host& want, const std::vector<double>& mag,
                                      int64_t terms) {
  for (int64_t i = 0; i < got.n; ++i) {
    const double g = value_at(got, i), w = value_at(want, i);
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    const double tol = ulp_of(want.dtype, w) + static_cast<double>(terms + 2) * eps_of_compute(want.dtype) * mag[i];
    if (std::fabs(g - w) <= tol) continue;
    return ::testing::AssertionFailure() << pl_dtype_name(got.dtype) << " element " << i << ": got " << g << ", want "
                                         << w << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// |got - want| <= rel * |want| + abs_tol (cross_entropy: CUDA's exp/log and another order of the
// sum of exponentials, whose rounding error grows with the class count).
::testing::AssertionResult close_rel(const Host& got, const Host& want, double rel, double abs_tol) {
  for (int64_t i = 0; i < got.n; ++i) {
    const double g = value_at(got, i), w = value_at(want, i);
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    if (std::fabs(g - w) <= rel * std::fabs(w) + abs_tol) continue;
    return ::testing::AssertionFailure() << pl_dtype_name(got.dtype) << " element " << i << ": got " << g << ", want "
                                         << w;
  }
  return ::testing::AssertionSuccess();
}

struct Shape3 {
  int64_t m, n, k;
};

}  // namespace

// Small integers make every product and partial sum exact in the compute type, so any summation
// order gives the same bits: an exact comparison that catches any indexing or layout mistake.
// Random reals then check the precision (within rounding of another summation order; TF32 or a
// reduction in the output type would not pass).
namespace {
void round_to_integers(Host& h) {
  for (int64_t i = 0; i < h.n; ++i) set_value(h, i, std::round(value_at(h, i)));
}
}  // namespace

TEST(CudaLayers, GemmMatchesCpu) {
  REQUIRE_GPU();
  const Shape3 shapes[] = {{1, 1, 1}, {7, 5, 3}, {64, 33, 17}, {128, 256, 96}, {0, 3, 2}, {3, 0, 2}, {3, 4, 0}};
  for (PL_DType dt : kFloats)
    for (const Shape3& s : shapes)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (double beta : {0.0, 0.5})
            for (bool integers : {true, false}) {
              SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                           " k=" + std::to_string(s.k) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                           " beta=" + std::to_string(beta) + (integers ? " integers" : " reals"));
              const std::vector<int64_t> sa = ta ? std::vector<int64_t>{s.k, s.m} : std::vector<int64_t>{s.m, s.k};
              const std::vector<int64_t> sb = tb ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n};
              Host a = random_host(dt, s.m * s.k, 71), b = random_host(dt, s.k * s.n, 72);
              Host c = random_host(dt, s.m * s.n, 73);
              if (integers) {
                round_to_integers(a);
                round_to_integers(b);
              }
              if (beta == 0)
                for (int64_t i = 0; i < c.n; ++i) set_value(c, i, NAN);  // beta == 0: c is only written
              const double alpha = 1.5;
              Dev da(a), db(b), dc(c);
              PL_Tensor ga = da.t(sa), gb = db.t(sb), gc = dc.t({s.m, s.n});
              ok(api()->gemm(cuda().get(), ta, tb, alpha, &ga, &gb, beta, &gc, nullptr));
              Host want = c;
              PL_Tensor ha = a.t(sa), hb = b.t(sb), hc = want.t({s.m, s.n});
              plrt::cpu::gemm(ta, tb, alpha, &ha, &hb, beta, &hc);
              if (integers) {
                EXPECT_TRUE(same_elements(dc.download(), want));
                continue;
              }
              // Magnitudes of the terms of every output element.
              std::vector<double> mag(static_cast<size_t>(s.m * s.n), 0.0);
              for (int64_t i = 0; i < s.m; ++i)
                for (int64_t j = 0; j < s.n; ++j) {
                  double t = beta != 0 ? std::fabs(beta * value_at(c, i * s.n + j)) : 0.0;
                  for (int64_t p = 0; p < s.k; ++p) {
                    const double av = value_at(a, ta ? p * s.m + i : i * s.k + p);
                    const double bv = value_at(b, tb ? j * s.k + p : p * s.n + j);
                    t += std::fabs(alpha * av * bv);
                  }
                  mag[static_cast<size_t>(i * s.n + j)] = t;
                }
              EXPECT_TRUE(close_sums(dc.download(), want, mag, s.k));
            }
}

TEST(CudaLayers, AddBiasReluAndBackwardMatchCpuExactly) {
  REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{0, 4}, {1, 1}, {7, 3}, {1000, 33}, {1025, 1024}};
  for (PL_DType dt : kFloats)
    for (const auto& [rows, cols] : shapes) {
      SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const int64_t n = rows * cols;
      Host y = random_host(dt, n, 81), bias = random_host(dt, cols, 82);
      plant_specials(y, true);
      Dev dy(y), dbias(bias);
      PL_Tensor ty = dy.t({rows, cols}), tbias = dbias.t();
      ok(api()->add_bias(cuda().get(), &ty, &tbias, nullptr));
      PL_Tensor hy = y.t({rows, cols}), hbias = bias.t();
      plrt::cpu::add_bias(&hy, &hbias);
      EXPECT_TRUE(same_elements(dy.download(), y));

      // relu into another buffer (offset: the scalar path), then in place.
      Dev dr(dt, n, 1);
      PL_Tensor tr = dr.t({rows, cols});
      ok(api()->relu(cuda().get(), &ty, &tr, nullptr));
      Host r(dt, n);
      PL_Tensor hr = r.t({rows, cols});
      plrt::cpu::relu(&hy, &hr);
      EXPECT_TRUE(same_elements(dr.download(), r));
      ok(api()->relu(cuda().get(), &ty, &ty, nullptr));
      EXPECT_TRUE(same_elements(dy.download(), r));

      // relu_backward, dx in place of dy.
      Host g = random_host(dt, n, 83);
      Dev dg(g);
      PL_Tensor tg = dg.t({rows, cols});
      ok(api()->relu_backward(cuda().get(), &tr, &tg, &tg, nullptr));
      PL_Tensor hg = g.t({rows, cols});
      plrt::cpu::relu_backward(&hr, &hg, &hg);
      EXPECT_TRUE(same_elements(dg.download(), g));
    }
}

TEST(CudaLayers, SumRowsMatchesCpu) {
  REQUIRE_GPU();
  // Wide (one tile per 32 columns), tall and thin (the rows split into segments), empty.
  const std::pair<int64_t, int64_t> shapes[] = {{0, 5}, {1, 1}, {7, 3}, {1000, 33}, {100000, 3}, {64, 70000}};
  for (PL_DType dt : kFloats)
    for (const auto& [rows, cols] : shapes)
      for (double beta : {0.0, 1.25})
        for (bool integers : {true, false}) {  // exact sums (any order), then reals (see GemmMatchesCpu)
          SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                       " beta=" + std::to_string(beta) + (integers ? " integers" : " reals"));
          Host x = random_host(dt, rows * cols, 91), out = random_host(dt, cols, 92);
          if (integers) round_to_integers(x);
          if (beta == 0)
            for (int64_t j = 0; j < cols; ++j) set_value(out, j, NAN);
          const double alpha = 0.5;
          Dev dx(x), dout(out);
          PL_Tensor tx = dx.t({rows, cols}), tout = dout.t();
          ok(api()->sum_rows(cuda().get(), alpha, &tx, beta, &tout, nullptr));
          Host want = out;
          PL_Tensor hx = x.t({rows, cols}), hout = want.t();
          plrt::cpu::sum_rows(alpha, &hx, beta, &hout);
          if (integers) {
            EXPECT_TRUE(same_elements(dout.download(), want));
            continue;
          }
          std::vector<double> mag(static_cast<size_t>(cols), 0.0);
          for (int64_t j = 0; j < cols; ++j) {
            double t = beta != 0 ? std::fabs(beta * value_at(out, j)) : 0.0;
            for (int64_t i = 0; i < rows; ++i) t += std::fabs(alpha * value_at(x, i * cols + j));
            mag[static_cast<size_t>(j)] = t;
          }
          EXPECT_TRUE(close_sums(dout.download(), want, mag, rows));
        }
}

TEST(CudaLayers, CrossEntropyMatchesCpu) {
  REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{0, 3}, {1, 1}, {7, 5}, {100, 1000}, {3, 40000}};
  for (PL_DType dt : {PL_F32, PL_F64})
    for (const auto& [n, c] : shapes)
      for (int mode = 0; mode < 3; ++mode) {  // no grad; a separate grad; grad in place of the logits
        SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " " + std::to_string(n) + "x" + std::to_string(c) +
                     " mode=" + std::to_string(mode));
        Host x = random_host(dt, n * c, 101, -20, 20);
        if (n > 1) set_value(x, c, 80.0);  // a large logit: the max must be subtracted
        Host labels(PL_I64, n);
        for (int64_t i = 0; i < n; ++i) labels.as<int64_t>()[i] = (i * 7919) % c;
        Host loss(dt, n), grad = random_host(dt, n * c, 102);
        const double scale = 0.25;
        Dev dx(x), dl(labels), dloss(loss), dgrad(grad);
        PL_Tensor tx = dx.t({n, c}), tl = dl.t(), tloss = dloss.t(), tgrad = dgrad.t({n, c});
        PL_Tensor* gpu_grad = mode == 0 ? nullptr : mode == 1 ? &tgrad : &tx;
        ok(api()->cross_entropy(cuda().get(), &tx, &tl, &tloss, gpu_grad, scale, nullptr));
        Host want_x = x;
        PL_Tensor hx = want_x.t({n, c}), hl = labels.t(), hloss = loss.t(), hgrad = grad.t({n, c});
        PL_Tensor* cpu_grad = mode == 0 ? nullptr : mode == 1 ? &hgrad : &hx;
        plrt::cpu::cross_entropy(&hx, &hl, &hloss, cpu_grad, scale);
        const double rel = dt == PL_F32 ? 1e-4 : 1e-12, abs_tol = dt == PL_F32 ? 1e-5 : 1e-13;
        EXPECT_TRUE(close_rel(dloss.download(), loss, rel, abs_tol));
        if (mode == 1) {
          EXPECT_TRUE(close_rel(dgrad.download(), grad, rel, abs_tol));
        } else {
          EXPECT_TRUE(same_elements(dgrad.download(), grad));  // untouched
        }
        if (mode == 2) {
          EXPECT_TRUE(close_rel(dx.download(), want_x, rel, abs_tol));
        }
      }
}

TEST(CudaLayers, CrossEntropyBadLabelIsReportedAtTheNextSynchronisationAndWritesNothing) {
  REQUIRE_GPU();
  const int64_t n = 5000, c = 10;
  Host x = random_host(PL_F32, n * c, 111);
  Host labels(PL_I64, n);
  for (int64_t i = 0; i < n; ++i) labels.as<int64_t>()[i] = i % c;
  labels.as<int64_t>()[4321] = -3;
  labels.as<int64_t>()[1234] = 10;  // the first bad row is the one reported
  Host loss = random_host(PL_F32, n, 112), grad = random_host(PL_F32, n * c, 113);
  PL_Tensor hx = x.t({n, c}), hl = labels.t(), hloss = loss.t(), hgrad = grad.t({n, c});
  const Outcome want = cpu_outcome([&] { plrt::cpu::cross_entropy(&hx, &hl, &hloss, &hgrad, 1.0); });
  ASSERT_EQ(want.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(want.message.find("label 10 at row 1234"), std::string::npos) << want.message;

  Dev dx(x), dl(labels), dloss(loss), dgrad(grad);
  PL_Tensor tx = dx.t({n, c}), tl = dl.t(), tloss = dloss.t(), tgrad = dgrad.t({n, c});
  ok(api()->cross_entropy(cuda().get(), &tx, &tl, &tloss, &tgrad, 1.0, nullptr));  // asynchronous: no error yet
  const Outcome got = outcome(api()->stream_synchronize(cuda().get(), nullptr));
  EXPECT_EQ(got.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(got.message, want.message + " (found on the GPU after the call returned; reported at stream_synchronize)");
  ok(api()->stream_synchronize(cuda().get(), nullptr));  // reported once
  EXPECT_TRUE(same_elements(dloss.download(), loss));
  EXPECT_TRUE(same_elements(dgrad.download(), grad));
  // The slot is clean for the next call.
  labels.as<int64_t>()[4321] = 1;
  labels.as<int64_t>()[1234] = 2;
  dl.upload(labels);
  ok(api()->cross_entropy(cuda().get(), &tx, &tl, &tloss, &tgrad, 1.0, nullptr));
}

TEST(CudaLayers, ArgmaxRowsMatchesCpu) {
  REQUIRE_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{0, 3}, {1, 1}, {9, 5}, {100, 1000}, {3, 40000}};
  for (PL_DType dt : {PL_F32, PL_F64})
    for (const auto& [rows, cols] : shapes) {
      SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      Host x = random_host(dt, rows * cols, 121);
      // Ties, NaNs and -inf rows: the first maximum; a NaN counts as the maximum.
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t base = i * cols;
        switch (i % 4) {
          case 0:
            for (int64_t j = 0; j < cols; ++j) set_value(x, base + j, std::floor(value_at(x, base + j)));
            break;
          case 1:
            set_value(x, base + (cols * 2) / 3, NAN);
            set_value(x, base + cols - 1, NAN);
            break;
          case 2:
            for (int64_t j = 0; j < cols; ++j) set_value(x, base + j, -INFINITY);
            break;
          default:
            break;
        }
      }
      Host out(PL_I64, rows), want(PL_I64, rows);
      Dev dx(x), dout(PL_I64, rows);
      PL_Tensor tx = dx.t({rows, cols}), tout = dout.t();
      ok(api()->argmax_rows(cuda().get(), &tx, &tout, nullptr));
      PL_Tensor hx = x.t({rows, cols}), hw = want.t();
      plrt::cpu::argmax_rows(&hx, &hw);
      EXPECT_TRUE(same_elements(dout.download(), want));
    }
}
