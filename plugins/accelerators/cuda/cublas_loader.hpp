// cuBLAS, opened with dlopen on the first gemm rather than linked: libcublas (with its
// half-gigabyte libcublasLt) would otherwise be loaded with the plugin, by every program that merely
// lists plugins or resolves accelerator="auto" on a machine without a GPU.  The plugin loads and
// its other kernels run where cuBLAS is not installed; gemm then fails naming the library.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace plrt::cuda {

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*,
                          const float*, int, const float*, int, const float*, float*, int);
  cublasStatus_t (*dgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const double*,
                          const double*, int, const double*, int, const double*, double*, int);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_name)(cublasStatus_t);
  const char* (*status_string)(cublasStatus_t);
};

// The process's cuBLAS (libcublas.so.<major of the headers>), loaded once and never unloaded.
// Throws PL_ERR_RUNTIME naming the library, the folders tried and dlerror() when it is missing.
const CublasApi& cublas();

// "CUBLAS_STATUS_...: description"
std::string cublas_status(cublasStatus_t s);

}  // namespace plrt::cuda
