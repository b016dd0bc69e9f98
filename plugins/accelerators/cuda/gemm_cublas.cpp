// gemm through cuBLAS: cublasSgemm / cublasDgemm for f32 / f64, cublasGemmEx with
// CUBLAS_COMPUTE_32F for f16 / bf16 (products and sums in f32, each result rounded once: what the
// ABI 1.3 contract and tensor cores compute).  The checks are the shared rules (kernel_args.hpp).
//
// cuBLAS is column-major.  A row-major matrix is the column-major view of its transpose, so the
// row-major c = op(a) @ op(b) is computed as the column-major c^T = op(b)^T @ op(a)^T: b first, a
// second, m and n swapped, each operand's "transpose" flag unchanged, leading dimensions the
// stored row lengths.
#include <limits>
#include <string>

#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

// cuBLAS indexes with int; a larger size would wrap.
int blas_size(int64_t v, const char* what) {
  return static_cast<int>(kernel_args::blas_index(v, std::numeric_limits<int>::max(), "gemm", what, "cuBLAS"));
}

}  // namespace

PL_Error* cuda_gemm(PL_Accelerator* acc, int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a,
                    const PL_Tensor* b, double beta, PL_Tensor* c, PL_Stream* stream) {
  return run(acc, [&] {
    const kernel_args::GemmDims d = kernel_args::gemm(kTarget, trans_a, trans_b, a, b, c);
    const int64_t m = d.m, n = d.n, k = d.k;
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
