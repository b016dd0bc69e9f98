// BlasHandles: one cuBLAS handle per device, created on the first gemm there, bound for each call
// to the call's stream.  Each (device, stream) gets a workspace of its own (cublasSetWorkspace),
// as PyTorch does: a handle's default workspace would be shared by gemms running concurrently on
// different streams.  One caller at a time binds and enqueues (the binding is the handle's state).
#pragma once

#include <map>
#include <mutex>

#include "cublas_loader.hpp"
#include "cuda_common.hpp"

namespace plrt::cuda {

class BlasHandles {
 public:
  BlasHandles() = default;
  ~BlasHandles();  // frees the workspaces and destroys the handles (errors ignored)
  BlasHandles(const BlasHandles&) = delete;
  BlasHandles& operator=(const BlasHandles&) = delete;

  // Runs fn(handle) with `device`'s handle (`device` is current) bound to `stream` and its workspace.
  template <class F>
  void run(int device, cudaStream_t stream, F&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn(bind_locked(device, stream));
  }

  // A stream is being destroyed: waits for its work and frees its workspaces.
  void forget_stream(cudaStream_t stream);

 private:
  struct Device {
    cublasHandle_t handle = nullptr;
    size_t workspace_bytes = 0;
    std::map<cudaStream_t, void*> workspaces;
  };
  cublasHandle_t bind_locked(int device, cudaStream_t stream);

  std::mutex mu_;
  std::map<int, Device> devices_;
};

}  // namespace plrt::cuda
