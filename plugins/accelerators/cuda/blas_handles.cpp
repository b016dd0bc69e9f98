// BlasHandles (see blas_handles.hpp).
#include "blas_handles.hpp"

#include <string>

namespace plrt::cuda {

namespace {

void check_blas(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(PL_ERR_RUNTIME, "cuda: " + what + " failed: " + cublas_status(s));
}

}  // namespace

BlasHandles::~BlasHandles() {
  if (devices_.empty()) return;  // no gemm ran: no CUDA call (cudaSetDevice would make a context)
  int current = -1;
  const bool have_current = cudaGetDevice(&current) == cudaSuccess;
  for (auto& [device, d] : devices_) {
    if (d.handle == nullptr || cudaSetDevice(device) != cudaSuccess) continue;
    for (auto& [stream, ws] : d.workspaces) cudaFree(ws);
    cublas().destroy(d.handle);  // loaded: a handle exists
  }
  if (have_current) cudaSetDevice(current);
  cudaGetLastError();
}

cublasHandle_t BlasHandles::bind_locked(int device, cudaStream_t stream) {
  const CublasApi& api = cublas();
  Device& d = devices_[device];
  if (d.handle == nullptr) {
    cublasHandle_t h = nullptr;
    check_blas(api.create(&h), "cublasCreate on cuda:" + std::to_string(device));
    d.handle = h;
    // No TF32 (f32 products stay f32, as the cpu reference computes them), and f16/bf16 results
    // rounded once: a split-K reduction must add its partial sums in f32, not in the output type.
    const auto mode = static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    check_blas(api.set_math_mode(h, mode), "cublasSetMathMode");
    int major = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
    d.workspace_bytes = size_t{major >= 9 ? 32u : 4u} << 20;  // cuBLAS's recommendation: 32 MiB from Hopper on
  }
  auto it = d.workspaces.find(stream);
  if (it == d.workspaces.end()) {
    void* ws = nullptr;
    check_cuda(cudaMalloc(&ws, d.workspace_bytes),
               "cudaMalloc of a cuBLAS workspace (" + std::to_string(d.workspace_bytes >> 20) + " MiB)");
    it = d.workspaces.emplace(stream, ws).first;
  }
  check_blas(api.set_stream(d.handle, stream), "cublasSetStream");  // resets the workspace: set it after
  check_blas(api.set_workspace(d.handle, it->second, d.workspace_bytes), "cublasSetWorkspace");
  return d.handle;
}

void BlasHandles::forget_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [device, d] : devices_) {
    auto it = d.workspaces.find(stream);
    if (it == d.workspaces.end()) continue;
    // The stream's gemms may still use the workspace: wait for them, then free it.
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (before freeing a cuBLAS workspace)");
    check_cuda(cudaFree(it->second), "cudaFree of a cuBLAS workspace");
    d.workspaces.erase(it);
  }
}

}  // namespace plrt::cuda
