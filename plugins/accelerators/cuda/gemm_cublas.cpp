// gemm through cuBLAS: cublasSgemm / cublasDgemm for f32 / f64, cublasGemmEx with
// CUBLAS_COMPUTE_32F for f16 / bf16 (products and sums in f32, each result rounded once: what the
// ABI 1.3 contract and tensor cores compute).  The checks and messages are the cpu reference's.
//
// cuBLAS is column-major.  A row-major matrix is the column-major view of its transpose, so the
// row-major c = op(a) @ op(b) is computed as the column-major c^T = op(b)^T @ op(a)^T: b first, a
// second, m and n swapped, each operand's "transpose" flag unchanged, leading dimensions the
// stored row lengths.
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "tensor_checks.hpp"

#include <limits>
#include <string>

namespace plrt::cuda {
namespace {

// cuBLAS indexes with int; a larger size would wrap.
int blas_size(int64_t v, const char* what) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (v > kMax)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("gemm: ") + what + " " + std::to_string(v) +
                                      " exceeds cuBLAS's index range (at most " + std::to_string(kMax) + ")");
  return static_cast<int>(v);
}

void check_trans(int32_t t, const char* name) {
  if (t != 0 && t != 1)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("gemm: ") + name + " " + std::to_string(t) +
                                      " is invalid; use 0 (the matrix as is) or 1 (its transpose)");
}

}  // namespace

PL_Error* cuda_gemm(PL_Accelerator* acc, int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a,
                    const PL_Tensor* b, double beta, PL_Tensor* c, PL_Stream* stream) {
  return run(acc, [&] {
    check_trans(trans_a, "trans_a");
    check_trans(trans_b, "trans_b");
    check_shaped(a, 2, "gemm", "a");
    check_shaped(b, 2, "gemm", "b");
    check_shaped(c, 2, "gemm", "c");
    require_float_dtype(a, "a", "gemm");
    check_same_dtype(a, "a", b, "b", "gemm");
    check_same_dtype(a, "a", c, "c", "gemm");

    const int64_t m = trans_a ? a->shape[1] : a->shape[0];
    const int64_t k = trans_a ? a->shape[0] : a->shape[1];
    const int64_t kb = trans_b ? b->shape[1] : b->shape[0];
    const int64_t n = trans_b ? b->shape[0] : b->shape[1];
    const std::string ops = " (trans_a " + std::to_string(trans_a) + ", trans_b " + std::to_string(trans_b) + ")";
    if (k != kb)
      fail(PL_ERR_INVALID_ARGUMENT, "gemm: " + both_shapes(a, "a", b, "b") + ops + ": op(a) is [" +
                                        std::to_string(m) + ", " + std::to_string(k) + "] and op(b) is [" +
                                        std::to_string(kb) + ", " + std::to_string(n) +
                                        "]; their inner sizes must match");
    if (c->shape[0] != m || c->shape[1] != n)
      fail(PL_ERR_INVALID_ARGUMENT, "gemm: c has shape " + shape_str(c) + " but op(a) @ op(b) is [" +
                                        std::to_string(m) + ", " + std::to_string(n) + "] (a " + shape_str(a) +
                                        ", b " + shape_str(b) + ops + ")");
    check_no_overlap(c, "c", a, "a", "gemm", false);
    check_no_overlap(c, "c", b, "b", "gemm", false);
    check_same_device(a, "a", b, "b", "gemm");
    check_same_device(a, "a", c, "c", "gemm");
    const bool product = m > 0 && n > 0 && k > 0;
    int im = 0, in = 0, ik = 0, lda = 0, ldb = 0;
    if (product) {  // every check before the device is touched
      im = blas_size(m, "m");
      in = blas_size(n, "n");
      ik = blas_size(k, "k");
      lda = blas_size(a->shape[1], "a's row length");
      ldb = blas_size(b->shape[1], "b's row length");
    }
    DeviceScope scope("gemm", *c, "c", stream);

    if (m == 0 || n == 0) return;
    if (k == 0) {  // no product: c = beta * c (cuBLAS would reject the zero leading dimensions)
      launch_scale_output(scope.launch(), *c, beta);
      return;
    }
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS's first operand: b
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    acc->blas.run(scope.device(), scope.stream(), [&](cublasHandle_t h) {
      const CublasApi& api = cublas();
      cublasStatus_t st;
      const char* fn;
      // beta == 0: cuBLAS never reads c, as the ABI promises (NaNs in c do not propagate).
      if (c->dtype == PL_F64) {
        fn = "cublasDgemm";
        st = api.dgemm(h, op_b, op_a, in, im, ik, &alpha, static_cast<const double*>(b->data), ldb,
                       static_cast<const double*>(a->data), lda, &beta, static_cast<double*>(c->data), in);
      } else if (c->dtype == PL_F32) {
        fn = "cublasSgemm";
        const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
        st = api.sgemm(h, op_b, op_a, in, im, ik, &al, static_cast<const float*>(b->data), ldb,
                       static_cast<const float*>(a->data), lda, &be, static_cast<float*>(c->data), in);
      } else {
        fn = "cublasGemmEx";
        const float al = static_cast<float>(alpha), be = static_cast<float>(beta);  // f32 for COMPUTE_32F
        const cudaDataType t = c->dtype == PL_F16 ? CUDA_R_16F : CUDA_R_16BF;
        st = api.gemm_ex(h, op_b, op_a, in, im, ik, &al, b->data, t, ldb, a->data, t, lda, &be, c->data, t, in,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      }
      if (st != CUBLAS_STATUS_SUCCESS)
        fail(PL_ERR_RUNTIME, std::string("gemm: ") + fn + " (m " + std::to_string(m) + ", n " + std::to_string(n) +
                                 ", k " + std::to_string(k) + ", " + pl_dtype_name(c->dtype) +
                                 ") failed: " + cublas_status(st));
    });
  });
}

}  // namespace plrt::cuda
