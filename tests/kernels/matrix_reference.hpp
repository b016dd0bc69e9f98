// Shared by the layer-kernel tests (test_cpu_layers.cpp, and their float16/bfloat16 forms in
// test_cpu_amp.cpp): row-major matrices over ref::Buf, random fills, and gemm's reference in double.
// Not in reference.hpp: test_cpu_optim.cpp has its own fill_random and values, which argument-
// dependent lookup would make ambiguous with these.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "reference.hpp"

namespace ref {

// A row-major matrix [rows, cols] (or a vector when cols < 0) over owned storage.
inline Buf mat(PL_DType dtype, int64_t rows, int64_t cols = -1) {
  Buf b(dtype, cols < 0 ? rows : rows * cols);
  if (cols >= 0) {
    b.t.ndim = 2;
    b.t.shape[0] = rows;
    b.t.shape[1] = cols;
  }
  return b;
}

inline void fill_random(Buf& b, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < b.n(); ++i) b.set(i, u(rng));
}

inline std::vector<double> values(const Buf& b) {
  std::vector<double> v(static_cast<size_t>(b.n()));
  for (int64_t i = 0; i < b.n(); ++i) v[static_cast<size_t>(i)] = b.at(i);
  return v;
}

// c = alpha * op(a) @ op(b) + beta * c in double; `bound` gets the sum of |terms| per element,
// the scale of the rounding error a float gemm may make.
inline void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const std::vector<double>& a,
                     const std::vector<double>& b, double beta, std::vector<double>& c, std::vector<double>& bound) {
  bound.assign(c.size(), 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double x = ta ? a[l * m + i] : a[i * k + l];
        const double y = tb ? b[j * k + l] : b[l * n + j];
        s += x * y;
        sa += std::fabs(x * y);
      }
      const size_t o = static_cast<size_t>(i * n + j);
      bound[o] = std::fabs(alpha) * sa + std::fabs(beta * c[o]);
      c[o] = alpha * s + (beta == 0 ? 0 : beta * c[o]);
    }
}

// The operands of gemm with op(a) [m, k] and op(b) [k, n] (a stored [k, m] when ta, b [n, k] when
// tb) and c [m, n], zero-filled.
struct GemmOperands {
  Buf a, b, c;
  GemmOperands(PL_DType d, bool ta, bool tb, int64_t m, int64_t n, int64_t k)
      : a(ta ? mat(d, k, m) : mat(d, m, k)), b(tb ? mat(d, n, k) : mat(d, k, n)), c(mat(d, m, n)) {}
};

// a = [[1, 2, 3], [4, 5, 6]] and b = [[6, 5], [4, 3], [2, 1]], whose product is [[20, 14], [56, 41]]
// (exact in every float dtype); c [2, 2] zero-filled.
struct SmallGemm : GemmOperands {
  explicit SmallGemm(PL_DType d) : GemmOperands(d, false, false, 2, 2, 3) {
    for (int i = 0; i < 6; ++i) {
      a.set(i, i + 1);
      b.set(i, 6 - i);
    }
  }
};

// Random operands in [-1, 1) (a, b, then c from rng), and what gemm(alpha, beta) must give in
// double (`want`), with ref_gemm's `bound`.
struct RandomGemm : GemmOperands {
  std::vector<double> want, bound;
  RandomGemm(PL_DType d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, double beta,
             std::mt19937_64& rng)
      : GemmOperands(d, ta, tb, m, n, k) {
    fill_random(a, rng);
    fill_random(b, rng);
    fill_random(c, rng);
    want = values(c);
    ref_gemm(ta, tb, m, n, k, alpha, values(a), values(b), beta, want, bound);
  }
};

// fn(ta, tb, m, n, k) for each transpose combination and each m, n, k in `sizes`, until fn
// returns false.
template <class Fn>
void for_each_gemm_shape(std::initializer_list<int64_t> sizes, Fn&& fn) {
  for (int t = 0; t < 4; ++t)
    for (int64_t m : sizes)
      for (int64_t n : sizes)
        for (int64_t k : sizes)
          if (!fn((t & 1) != 0, (t & 2) != 0, m, n, k)) return;
}

}  // namespace ref
