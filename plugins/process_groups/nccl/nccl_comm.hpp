// One NCCL communicator and its stream: set-up through the rendezvous store, enqueueing, waiting
// with a deadline, and abort.  Everything that needs the CUDA driver (libcuda.so.1) stays inside
// this plugin: the runtime, the SDK and the other plugins start without it.
//
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so that no NCCL call can hang:
// every call that answers ncclInProgress is polled with ncclCommGetAsyncError until a deadline,
// and a communicator that times out or reports an asynchronous error is aborted (ncclCommAbort),
// which also ends the kernels it has in flight.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

#include "store_client.hpp"

namespace plrt::nccl {

using Clock = std::chrono::steady_clock;

// "cudaErrorNoDevice: no CUDA-capable device is detected"
std::string cuda_error_text(cudaError_t rc);
// Throws plugin::Failure(PL_ERR_RUNTIME) with `what` and the CUDA error; clears the sticky error.
void check_cuda(cudaError_t rc, const std::string& what);

// The ncclDataType_t of a plrt dtype (every PL_DType has one).
ncclDataType_t nccl_dtype(PL_DType dtype);
// The ncclRedOp_t of SUM, PRODUCT, MIN, MAX, AVG.
ncclRedOp_t nccl_op(PL_ReduceOp op);

// How many CUDA devices this process sees; 0 with `reason` set when there is no driver or GPU
// (cudaGetDeviceCount fails and leaves its output untouched: the return code is checked).
int visible_device_count(std::string* reason);

class Comm {
 public:
  // Sets the device, exchanges the unique id through the store under `key_prefix` and initialises
  // the communicator, all within `timeout_ms`.
  Comm(const pg::StoreClient& store, const std::string& key_prefix, int rank, int world_size, int device,
       int64_t timeout_ms);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // Runs `enqueue(comm, stream)` (NCCL calls, usually inside ncclGroupStart/End), after making the
  // stream wait for the work already queued on the default stream.  Polls ncclInProgress until
  // `deadline`.  Throws plugin::Failure; on timeout or NCCL error the communicator is aborted.
  void enqueue(const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& body, const std::string& what,
               Clock::time_point deadline);
  // Waits until the work enqueued so far has finished on the GPU, polling the stream and
  // NCCL's asynchronous error until `deadline`.  Throws plugin::Failure (PL_ERR_TIMEOUT on timeout,
  // after aborting the communicator).
  void synchronize(const std::string& what, Clock::time_point deadline);
  // Aborts the communicator (safe from any thread, idempotent); later calls fail with `reason`.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }

 private:
  void release() noexcept;
  // The communicator's state: ncclSuccess, ncclInProgress or an error.  Requires mu_.
  ncclResult_t async_state_locked();
  [[noreturn]] void fail_locked(PL_ErrorCode code, const std::string& message);
  void wait_ready_locked(std::unique_lock<std::mutex>& lock, const std::string& what, Clock::time_point deadline);

  std::mutex mu_;  // guards comm_: NCCL calls are short; nobody sleeps holding it
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t default_done_ = nullptr;  // recorded on the legacy default stream before each op
  cudaEvent_t done_ = nullptr;          // recorded on stream_ by synchronize()
  int device_ = 0;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
};

}  // namespace plrt::nccl
