// gemm through OpenBLAS, and the size of OpenBLAS's thread pool (see kernels.hpp).  float16 and
// bfloat16 are emulated as tensor cores compute them: widened to float scratch, cblas_sgemm, each
// result rounded once.
#include <cblas.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;

// OpenBLAS indexes with blasint (int in the LP64 build Debian ships); a larger size would wrap.
blasint blas_size(int64_t v, const char* what) {
  return static_cast<blasint>(
      kernel_args::blas_index(v, std::numeric_limits<blasint>::max(), "gemm", what, "OpenBLAS"));
}

// c = beta * c, for k == 0 (no product to add); beta == 0 writes zeros, dropping NaNs in c.
template <class T>
void scale_only(T* c, int64_t n, double beta) {
  const T b = static_cast<T>(beta);
  if (beta == 0) {
    for (int64_t i = 0; i < n; ++i) c[i] = T(0);
  } else {
    for (int64_t i = 0; i < n; ++i) c[i] = b * c[i];
  }
}

// k == 0 for f16/bf16: c = beta * c in float, rounded once.
template <class Tr>
void scale_only_half(typename Tr::Storage* c, int64_t n, double beta) {
  const float b = static_cast<float>(beta);
  for (int64_t i = 0; i < n; ++i) c[i] = beta == 0 ? Tr::store(0.0f) : Tr::store(b * Tr::load(c[i]));
}

template <class Tr>
std::vector<float> widen(const PL_Tensor* t) {
  const auto* p = data_of<Tr>(t);
  std::vector<float> out(static_cast<size_t>(t->numel));
  for (size_t i = 0; i < out.size(); ++i) out[i] = Tr::load(p[i]);
  return out;
}

// The f16/bf16 product on float scratch: a and b widened exactly, c too when beta reads it; the
// float result is rounded once into c.
template <class Tr>
void gemm_half(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha,
               const PL_Tensor* a, blasint lda, const PL_Tensor* b, blasint ldb, double beta, const PL_Tensor* c) {
  const std::vector<float> wa = widen<Tr>(a), wb = widen<Tr>(b);
  std::vector<float> wc = beta != 0 ? widen<Tr>(c) : std::vector<float>(static_cast<size_t>(c->numel));
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), wa.data(), lda, wb.data(), ldb,
              static_cast<float>(beta), wc.data(), n);
  auto* out = data_of<Tr>(c);
  for (size_t i = 0; i < wc.size(); ++i) out[i] = Tr::store(wc[i]);
}

}  // namespace

void gemm(int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a, const PL_Tensor* b, double beta,
          const PL_Tensor* c) {
  const kernel_args::GemmDims d = kernel_args::gemm(kTarget, trans_a, trans_b, a, b, c);
  const int64_t m = d.m, n = d.n, k = d.k;

  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (c->dtype == PL_F16)
      scale_only_half<F16>(data_of<F16>(c), c->numel, beta);
    else if (c->dtype == PL_BF16)
      scale_only_half<BF16>(data_of<BF16>(c), c->numel, beta);
    else
      dispatch_f32_f64(c->dtype, [&](auto tag) {
        using T = decltype(tag);
        scale_only(static_cast<T*>(c->data), c->numel, beta);
      });
    return;
  }
  const blasint bm = blas_size(m, "m"), bn = blas_size(n, "n"), bk = blas_size(k, "k");
  // Row-major leading dimensions: the stored row length of each matrix.
  const blasint lda = blas_size(a->shape[1], "a's row length");
  const blasint ldb = blas_size(b->shape[1], "b's row length");
  const blasint ldc = bn;
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  // BLAS itself guarantees that beta == 0 never reads c, as the ABI promises.
  if (c->dtype == PL_F16)
    gemm_half<F16>(ta, tb, bm, bn, bk, alpha, a, lda, b, ldb, beta, c);
  else if (c->dtype == PL_BF16)
    gemm_half<BF16>(ta, tb, bm, bn, bk, alpha, a, lda, b, ldb, beta, c);
  else if (c->dtype == PL_F32)
    cblas_sgemm(CblasRowMajor, ta, tb, bm, bn, bk, static_cast<float>(alpha), static_cast<const float*>(a->data), lda,
                static_cast<const float*>(b->data), ldb, static_cast<float>(beta), static_cast<float*>(c->data), ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, bm, bn, bk, alpha, static_cast<const double*>(a->data), lda,
                static_cast<const double*>(b->data), ldb, beta, static_cast<double*>(c->data), ldc);
}

void set_blas_threads(int n) {
  if (n < 1)
    fail(PL_ERR_INVALID_ARGUMENT, "num_threads " + std::to_string(n) + " is invalid; it must be an integer >= 1");
  openblas_set_num_threads(n);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace plrt::cpu
