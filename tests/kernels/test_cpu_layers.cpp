// The layer kernels (ABI 1.2): gemm against naive triple loops in double for every transpose
// combination and odd sizes, and add_bias, sum_rows, relu, relu_backward, cross_entropy and
// argmax_rows against plain reference loops; aliasing, NaN handling, and every error they name.
// (Their float16/bfloat16 forms, ABI 1.3, are in test_cpu_amp.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "matrix_reference.hpp"
#include "reference.hpp"

using ref::Buf;
using ref::expect_failure;
using ref::fill_random;
using ref::mat;
using ref::values;

namespace {

const PL_DType kDtypes[] = {PL_F32, PL_F64};

// Relative tolerance of one rounding in the dtype, times a margin for the sums.
double eps(PL_DType d) { return d == PL_F64 ? 1e-15 : 1e-7; }

// ---- gemm ----

TEST(Gemm, MatchesNaiveLoopsForEveryTransposeAndOddSizes) {
  std::mt19937_64 rng(7);
  for (PL_DType d : kDtypes)
    ref::for_each_gemm_shape({1, 7, 33, 129}, [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
      const double alpha = 1.5, beta = -0.75;
      ref::RandomGemm g(d, ta, tb, m, n, k, alpha, beta, rng);
      plrt::cpu::gemm(ta, tb, alpha, g.a.get(), g.b.get(), beta, g.c.get());
      int bad = 0;
      for (int64_t i = 0; i < g.c.n() && bad < 3; ++i)
        if (!(std::fabs(g.c.at(i) - g.want[i]) <= 4 * eps(d) * (k + 2) * g.bound[i])) {
          ADD_FAILURE() << ref::dtype_name(d) << " ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                        << " [" << i << "]: got " << g.c.at(i) << ", want " << g.want[i];
          ++bad;
        }
      return true;
    });
}

TEST(Gemm, BetaZeroOnlyWritesC) {
  for (PL_DType d : kDtypes) {
    ref::SmallGemm g(d);
    for (int i = 0; i < 4; ++i) g.c.set(i, std::numeric_limits<double>::quiet_NaN());
    plrt::cpu::gemm(0, 0, 2.0, g.a.get(), g.b.get(), 0.0, g.c.get());
    // [[1,2,3],[4,5,6]] @ [[6,5],[4,3],[2,1]] = [[20,14],[56,41]], times 2
    EXPECT_EQ(values(g.c), (std::vector<double>{40, 28, 112, 82})) << ref::dtype_name(d);
  }
}

TEST(Gemm, EmptyInnerSizeScalesC) {
  for (PL_DType d : kDtypes) {
    Buf a = mat(d, 2, 0), b = mat(d, 0, 3), c = mat(d, 2, 3);
    for (int i = 0; i < 6; ++i) c.set(i, i);
    plrt::cpu::gemm(0, 0, 1.0, a.get(), b.get(), 0.5, c.get());
    EXPECT_EQ(values(c), (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5}));
    c.set(0, std::numeric_limits<double>::quiet_NaN());
    plrt::cpu::gemm(0, 0, 1.0, a.get(), b.get(), 0.0, c.get());
    EXPECT_EQ(values(c), std::vector<double>(6, 0.0));
    Buf e = mat(d, 0, 3);  // m == 0: nothing to do
    plrt::cpu::gemm(0, 0, 1.0, mat(d, 0, 2).get(), mat(d, 2, 3).get(), 0.0, e.get());
  }
}

TEST(Gemm, ShapeAndArgumentErrorsNameThem) {
  Buf a = mat(PL_F32, 3, 4), b = mat(PL_F32, 5, 6), c = mat(PL_F32, 3, 6), good_b = mat(PL_F32, 4, 6);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), b.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"[3, 4]", "[5, 6]", "inner sizes"});
  Buf c_bad = mat(PL_F32, 6, 3);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), good_b.get(), 0, c_bad.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"c has shape [6, 3]", "[3, 6]"});
  // a^T is [4, 3]: with b [4, 6] the inner sizes are 3 and 4.
  expect_failure([&] { plrt::cpu::gemm(1, 0, 1, a.get(), good_b.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"[3, 4]", "[4, 6]", "trans_a 1"});
  expect_failure([&] { plrt::cpu::gemm(2, 0, 1, a.get(), good_b.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"trans_a 2", "0", "1"});
  Buf v = mat(PL_F32, 12);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, v.get(), good_b.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"a must be a matrix", "ndim 1", "[12]"});
  Buf ia = mat(PL_I32, 3, 4);  // float16/bfloat16 are ABI 1.3 dtypes (test_cpu_amp.cpp); integers are not
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, ia.get(), good_b.get(), 0, c.get()); }, PL_ERR_UNSUPPORTED,
                 {"int32", "float32, float64, float16, bfloat16"});
  Buf h = mat(PL_F16, 4, 6);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), h.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"float32", "float16", "same dtype"});
  Buf d = mat(PL_F64, 4, 6);
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, a.get(), d.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"float32", "float64"});
  Buf lying = mat(PL_F32, 3, 4);
  lying.t.numel = 11;
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, lying.get(), good_b.get(), 0, c.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"[3, 4]", "numel 11"});
  // c over a's memory: BLAS would read what it has already written.
  Buf sq = mat(PL_F32, 3, 3), sq_b = mat(PL_F32, 3, 3);
  PL_Tensor alias = *sq.get();
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, sq.get(), sq_b.get(), 0, &alias); }, PL_ERR_INVALID_ARGUMENT,
                 {"c overlaps a"});
}

TEST(Gemm, ThreadCountIsSetAndChecked) {
  plrt::cpu::set_blas_threads(1);
  EXPECT_EQ(plrt::cpu::blas_threads(), 1);
  expect_failure([] { plrt::cpu::set_blas_threads(0); }, PL_ERR_INVALID_ARGUMENT, {"num_threads 0", ">= 1"});
}

// ---- add_bias, sum_rows ----

TEST(AddBias, AddsToEveryRow) {
  for (PL_DType d : kDtypes) {
    Buf y = mat(d, 3, 5), bias = mat(d, 5);
    for (int i = 0; i < 15; ++i) y.set(i, i);
    for (int j = 0; j < 5; ++j) bias.set(j, 100 * (j + 1));
    plrt::cpu::add_bias(y.get(), bias.get());
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) EXPECT_EQ(y.at(i * 5 + j), i * 5 + j + 100 * (j + 1));
  }
  Buf y = mat(PL_F32, 3, 5), b4 = mat(PL_F32, 4), b2 = mat(PL_F32, 1, 5), bd = mat(PL_F64, 5), bi = mat(PL_I64, 5);
  expect_failure([&] { plrt::cpu::add_bias(y.get(), b4.get()); }, PL_ERR_INVALID_ARGUMENT, {"[3, 5]", "[4]"});
  expect_failure([&] { plrt::cpu::add_bias(y.get(), b2.get()); }, PL_ERR_INVALID_ARGUMENT, {"bias must be a vector"});
  expect_failure([&] { plrt::cpu::add_bias(y.get(), bd.get()); }, PL_ERR_INVALID_ARGUMENT, {"float64"});
  Buf yi = mat(PL_I64, 3, 5);
  expect_failure([&] { plrt::cpu::add_bias(yi.get(), bi.get()); }, PL_ERR_UNSUPPORTED, {"int64"});
}

TEST(SumRows, ColumnSumsWithAlphaAndBeta) {
  std::mt19937_64 rng(3);
  for (PL_DType d : kDtypes) {
    const int64_t rows = 37, cols = 19;
    Buf x = mat(d, rows, cols), out = mat(d, cols);
    fill_random(x, rng);
    fill_random(out, rng);
    std::vector<double> want = values(out);
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0;
      for (int64_t i = 0; i < rows; ++i) s += x.at(i * cols + j);
      want[j] = 0.5 * s + 2.0 * want[j];
    }
    plrt::cpu::sum_rows(0.5, x.get(), 2.0, out.get());
    for (int64_t j = 0; j < cols; ++j) EXPECT_NEAR(out.at(j), want[j], 64 * eps(d) * rows) << j;

    // beta 0 only writes out, and no rows sum to zero
    for (int64_t j = 0; j < cols; ++j) out.set(j, std::numeric_limits<double>::quiet_NaN());
    Buf none = mat(d, 0, cols);
    plrt::cpu::sum_rows(1.0, none.get(), 0.0, out.get());
    EXPECT_EQ(values(out), std::vector<double>(cols, 0.0));
  }
  Buf x = mat(PL_F32, 4, 3), o2 = mat(PL_F32, 4), oi = mat(PL_I32, 3), xi = mat(PL_I32, 4, 3);
  expect_failure([&] { plrt::cpu::sum_rows(1, x.get(), 0, o2.get()); }, PL_ERR_INVALID_ARGUMENT, {"[4, 3]", "[4]"});
  expect_failure([&] { plrt::cpu::sum_rows(1, x.get(), 0, oi.get()); }, PL_ERR_INVALID_ARGUMENT, {"int32"});
  expect_failure([&] { plrt::cpu::sum_rows(1, xi.get(), 0, oi.get()); }, PL_ERR_UNSUPPORTED, {"int32"});
}

// ---- relu, relu_backward ----

TEST(Relu, ForwardBackwardAndInPlace) {
  for (PL_DType d : kDtypes) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> in = {-2, -0.5, 0, 0.25, 3, nan};
    Buf x = mat(d, 2, 3), y = mat(d, 2, 3), dy = mat(d, 2, 3), dx = mat(d, 2, 3);
    for (int i = 0; i < 6; ++i) {
      x.set(i, in[i]);
      dy.set(i, 10 + i);
    }
    plrt::cpu::relu(x.get(), y.get());
    const std::vector<double> want_y = {0, 0, 0, 0.25, 3, nan};
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(ref::same_value(y.at(i), want_y[i])) << i << ": " << y.at(i);
    plrt::cpu::relu_backward(y.get(), dy.get(), dx.get());
    EXPECT_EQ(values(dx), (std::vector<double>{0, 0, 0, 13, 14, 0}));
    // y may be x; dx may be dy
    plrt::cpu::relu(x.get(), x.get());
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(ref::same_value(x.at(i), want_y[i])) << i;
    plrt::cpu::relu_backward(y.get(), dy.get(), dy.get());
    EXPECT_EQ(values(dy), (std::vector<double>{0, 0, 0, 13, 14, 0}));
  }
  Buf x = mat(PL_F32, 2, 3), y = mat(PL_F32, 3, 2), y6 = mat(PL_F32, 6), yd = mat(PL_F64, 2, 3), u = mat(PL_U8, 2, 3);
  expect_failure([&] { plrt::cpu::relu(x.get(), y.get()); }, PL_ERR_INVALID_ARGUMENT, {"[2, 3]", "[3, 2]"});
  expect_failure([&] { plrt::cpu::relu(x.get(), y6.get()); }, PL_ERR_INVALID_ARGUMENT, {"[2, 3]", "[6]"});
  expect_failure([&] { plrt::cpu::relu(x.get(), yd.get()); }, PL_ERR_INVALID_ARGUMENT, {"float64"});
  expect_failure([&] { plrt::cpu::relu(u.get(), u.get()); }, PL_ERR_UNSUPPORTED, {"uint8"});
  expect_failure([&] { plrt::cpu::relu_backward(x.get(), y.get(), x.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"[2, 3]", "[3, 2]"});
  expect_failure([&] { plrt::cpu::relu_backward(x.get(), x.get(), yd.get()); }, PL_ERR_INVALID_ARGUMENT, {"float64"});
  // dx may be dy, but not y (it is still being read as the mask)
  Buf dy = mat(PL_F32, 2, 3);
  expect_failure([&] { plrt::cpu::relu_backward(x.get(), dy.get(), x.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"dx overlaps y"});
  // a view one element into x overlaps it without being it
  Buf big = mat(PL_F32, 7);
  PL_Tensor shifted = *big.get();
  shifted.numel = 6;
  shifted.shape[0] = 6;
  PL_Tensor head = shifted;
  shifted.data = big.as<float>() + 1;
  expect_failure([&] { plrt::cpu::relu(&head, &shifted); }, PL_ERR_INVALID_ARGUMENT, {"y overlaps x", "same buffer"});
}

// ---- cross_entropy ----

struct CeRef {
  std::vector<double> loss, grad;
};

CeRef ref_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& labels, int64_t c, double scale) {
  CeRef r;
  const int64_t n = static_cast<int64_t>(labels.size());
  r.grad.resize(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, x[i * c + j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - mx);
    r.loss.push_back(mx + std::log(s) - x[i * c + labels[i]]);
    for (int64_t j = 0; j < c; ++j)
      r.grad[i * c + j] = scale * (std::exp(x[i * c + j] - mx) / s - (j == labels[i] ? 1.0 : 0.0));
  }
  return r;
}

Buf labels_buf(const std::vector<int64_t>& labels) {
  Buf l = mat(PL_I64, static_cast<int64_t>(labels.size()));
  for (size_t i = 0; i < labels.size(); ++i) l.as<int64_t>()[i] = labels[i];
  return l;
}

TEST(CrossEntropy, MatchesDoubleReferenceAndGradMayAliasLogits) {
  std::mt19937_64 rng(11);
  const int64_t n = 13, c = 10;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int64_t>(rng() % c));
  for (PL_DType d : kDtypes) {
    Buf x = mat(d, n, c), loss = mat(d, n), grad = mat(d, n, c), lab = labels_buf(labels);
    fill_random(x, rng, -5, 5);
    const CeRef want = ref_cross_entropy(values(x), labels, c, 0.25);
    const double tol = d == PL_F64 ? 1e-13 : 2e-6;
    plrt::cpu::cross_entropy(x.get(), lab.get(), loss.get(), grad.get(), 0.25);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(loss.at(i), want.loss[i], tol * (1 + want.loss[i])) << i;
    for (int64_t i = 0; i < n * c; ++i) EXPECT_NEAR(grad.at(i), want.grad[i], tol) << i;

    Buf loss2 = mat(d, n);  // no grad: the same loss
    plrt::cpu::cross_entropy(x.get(), lab.get(), loss2.get(), nullptr, 0.25);
    EXPECT_EQ(values(loss2), values(loss));

    const std::vector<double> separate = values(grad);
    plrt::cpu::cross_entropy(x.get(), lab.get(), loss2.get(), x.get(), 0.25);  // in place
    EXPECT_EQ(values(x), separate);
    EXPECT_EQ(values(loss2), values(loss));
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  for (PL_DType d : kDtypes) {
    Buf x = mat(d, 2, 3), loss = mat(d, 2), grad = mat(d, 2, 3), lab = labels_buf({1, 0});
    const std::vector<double> in = {1e4, 0, -1e4, 1e4, 1e4 - 1, -1e4};
    for (int i = 0; i < 6; ++i) x.set(i, in[i]);
    plrt::cpu::cross_entropy(x.get(), lab.get(), loss.get(), grad.get(), 1.0);
    const CeRef want = ref_cross_entropy(in, {1, 0}, 3, 1.0);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(std::isfinite(loss.at(i))) << i;
      EXPECT_NEAR(loss.at(i), want.loss[i], 1e-6 * (1 + want.loss[i])) << i;
    }
    EXPECT_NEAR(loss.at(0), 1e4, 1e-3);
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(std::isfinite(grad.at(i))) << i;
      EXPECT_NEAR(grad.at(i), want.grad[i], 1e-6) << i;
    }
  }
}

TEST(CrossEntropy, BadLabelNamesRowValueAndClassesAndWritesNothing) {
  Buf x = mat(PL_F32, 3, 4), loss = mat(PL_F32, 3), grad = mat(PL_F32, 3, 4), lab = labels_buf({0, 3, 4});
  for (int i = 0; i < 3; ++i) loss.set(i, -7);
  expect_failure([&] { plrt::cpu::cross_entropy(x.get(), lab.get(), loss.get(), grad.get(), 1); },
                 PL_ERR_INVALID_ARGUMENT, {"label 4", "row 2", "[0, 4)"});
  EXPECT_EQ(values(loss), (std::vector<double>{-7, -7, -7}));
  Buf neg = labels_buf({0, -1, 0});
  expect_failure([&] { plrt::cpu::cross_entropy(x.get(), neg.get(), loss.get(), nullptr, 1); }, PL_ERR_INVALID_ARGUMENT,
                 {"label -1", "row 1"});
}

TEST(CrossEntropy, ShapeAndDtypeErrors) {
  Buf x = mat(PL_F32, 3, 4), loss = mat(PL_F32, 3), grad = mat(PL_F32, 3, 4), lab = labels_buf({0, 1, 2});
  Buf lab2 = labels_buf({0, 1}), loss4 = mat(PL_F32, 4), grad_t = mat(PL_F32, 4, 3), loss_d = mat(PL_F64, 3);
  Buf lab_i32 = mat(PL_I32, 3), xh = mat(PL_F16, 3, 4);
  auto ce = [](Buf& x_, Buf& l_, Buf& loss_, PL_Tensor* g) {
    plrt::cpu::cross_entropy(x_.get(), l_.get(), loss_.get(), g, 1);
  };
  expect_failure([&] { ce(x, lab2, loss, nullptr); }, PL_ERR_INVALID_ARGUMENT, {"[3, 4]", "[2]", "labels"});
  expect_failure([&] { ce(x, lab, loss4, nullptr); }, PL_ERR_INVALID_ARGUMENT, {"[3, 4]", "[4]", "loss"});
  expect_failure([&] { ce(x, lab, loss, grad_t.get()); }, PL_ERR_INVALID_ARGUMENT, {"[3, 4]", "[4, 3]"});
  expect_failure([&] { ce(x, lab, loss_d, nullptr); }, PL_ERR_INVALID_ARGUMENT, {"float64"});
  expect_failure([&] { ce(x, lab_i32, loss, nullptr); }, PL_ERR_UNSUPPORTED, {"labels", "int32", "int64"});
  expect_failure([&] { ce(xh, lab, loss, nullptr); }, PL_ERR_UNSUPPORTED, {"float16"});
}

// ---- argmax_rows ----

TEST(ArgmaxRows, FirstMaximumWinsAndNaNIsTheMaximum) {
  for (PL_DType d : kDtypes) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> in = {1,         3,   3,  2,    //
                                    -1,        -1,  -1, -1,   //
                                    0,         nan, 5,  nan,  //
                                    -INFINITY, -2,  7,  7};
    Buf x = mat(d, 4, 4), out = mat(PL_I64, 4);
    for (int i = 0; i < 16; ++i) x.set(i, in[i]);
    plrt::cpu::argmax_rows(x.get(), out.get());
    EXPECT_EQ(std::vector<int64_t>(out.as<int64_t>(), out.as<int64_t>() + 4), (std::vector<int64_t>{1, 0, 1, 2}));
  }
  Buf x = mat(PL_F32, 3, 4), out2 = mat(PL_I64, 2), out_f = mat(PL_F32, 3), empty = mat(PL_F32, 3, 0),
      out3 = mat(PL_I64, 3), xb = mat(PL_BF16, 3, 4);
  expect_failure([&] { plrt::cpu::argmax_rows(x.get(), out2.get()); }, PL_ERR_INVALID_ARGUMENT, {"[3, 4]", "[2]"});
  expect_failure([&] { plrt::cpu::argmax_rows(x.get(), out_f.get()); }, PL_ERR_UNSUPPORTED, {"float32", "int64"});
  expect_failure([&] { plrt::cpu::argmax_rows(empty.get(), out3.get()); }, PL_ERR_INVALID_ARGUMENT,
                 {"[3, 0]", "empty row"});
  expect_failure([&] { plrt::cpu::argmax_rows(xb.get(), out3.get()); }, PL_ERR_UNSUPPORTED, {"bfloat16"});
}

TEST(LayerKernels, TensorsOnAnotherDeviceAreRefused) {
  Buf x = mat(PL_F32, 2, 2), y = mat(PL_F32, 2, 2);
  y.t.device = {PL_DEVICE_CUDA, 0};
  expect_failure([&] { plrt::cpu::relu(x.get(), y.get()); }, PL_ERR_INVALID_ARGUMENT, {"cuda:0"});
  expect_failure([&] { plrt::cpu::gemm(0, 0, 1, x.get(), x.get(), 0, y.get()); }, PL_ERR_INVALID_ARGUMENT, {"cuda:0"});
}

}  // namespace
