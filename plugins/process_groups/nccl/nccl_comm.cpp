#include "nccl_comm.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <thread>

#include "gpu_sharing.hpp"

namespace plrt::nccl {

using plugin::fail;

std::string cuda_error_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}

void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not see it
  fail(PL_ERR_RUNTIME, what + " failed: " + cuda_error_text(rc));
}

ncclDataType_t nccl_dtype(PL_DType dtype) {
  switch (dtype) {
    case PL_F32:
      return ncclFloat32;
    case PL_F64:
      return ncclFloat64;
    case PL_F16:
      return ncclFloat16;
    case PL_BF16:
      return ncclBfloat16;
    case PL_I32:
      return ncclInt32;
    case PL_I64:
      return ncclInt64;
    case PL_U8:
      return ncclUint8;
    default:
      fail(PL_ERR_INVALID_ARGUMENT, "nccl: unknown dtype " + std::to_string(dtype) +
                                        " (valid: float32, float64, float16, bfloat16, int32, int64, uint8)");
  }
}

ncclRedOp_t nccl_op(PL_ReduceOp op) {
  switch (op) {
    case PL_REDUCE_SUM:
      return ncclSum;
    case PL_REDUCE_PRODUCT:
      return ncclProd;
    case PL_REDUCE_MIN:
      return ncclMin;
    case PL_REDUCE_MAX:
      return ncclMax;
    case PL_REDUCE_AVG:
      return ncclAvg;
    default:
      fail(PL_ERR_INVALID_ARGUMENT,
           "nccl: unknown reduce op " + std::to_string(op) + " (valid: sum, avg, min, max, product)");
  }
}

int visible_device_count(std::string* reason) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);  // leaves n untouched on error
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = cuda_error_text(rc);
    return 0;
  }
  if (n == 0 && reason) *reason = "the CUDA runtime sees no device (check CUDA_VISIBLE_DEVICES)";
  return n;
}

namespace {

int64_t ms_left(Clock::time_point deadline) {
  return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

// Backs off from spinning to 1 ms sleeps: a collective that takes long costs little CPU.
void pause(int& round) {
  if (round < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(round < 256 ? 50 : 1000));
  }
  ++round;
}

// The GPU this rank drives, as NCCL tells GPUs apart (host and PCI bus id).
GpuIdentity this_gpu(int device) {
  GpuIdentity g = this_host();
  char pci[64] = {};
  check_cuda(cudaDeviceGetPCIBusId(pci, sizeof pci - 1, device),
             "cudaDeviceGetPCIBusId(" + std::to_string(device) + ")");
  g.pci = pci;
  std::transform(g.pci.begin(), g.pci.end(), g.pci.begin(), [](unsigned char c) { return std::tolower(c); });
  g.device = device;
  return g;
}

}  // namespace

Comm::Comm(const pg::StoreClient& store, const std::string& key_prefix, int rank, int world_size, int device,
           int64_t timeout_ms)
    : device_(device) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");

  // Rank 0 makes the unique id and publishes it.  The key carries this rank's count of groups made
  // under this name (every rank makes the same groups in the same order, so the counts agree), so
  // a group re-made under the same name never reads a stale id.
  const int64_t generation = store.add(key_prefix + "nccl_generation/" + std::to_string(rank), 1);
  // Two ranks on one GPU: refused here by name, on every rank, before NCCL fails obscurely.
  check_one_gpu_per_rank(store, key_prefix + "nccl_gpu/" + std::to_string(generation) + "/", rank, world_size,
                         this_gpu(device), deadline);
  const std::string key = key_prefix + "nccl_unique_id/" + std::to_string(generation);
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) fail(PL_ERR_RUNTIME, std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(rc));
    store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof id));
  } else {
    std::string bytes = store.get(key, ms_left(deadline));
    if (bytes.size() != sizeof id)
      fail(PL_ERR_RUNTIME, "nccl: the unique id under '" + key + "' has " + std::to_string(bytes.size()) +
                               " bytes, expected " + std::to_string(sizeof id) + " (another job on this store?)");
    std::memcpy(&id, bytes.data(), sizeof id);
  }

  try {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&default_done_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    std::unique_lock<std::mutex> lock(mu_);
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, world_size, id, rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      std::string msg = std::string("ncclCommInitRankConfig (rank ") + std::to_string(rank) + " of " +
                        std::to_string(world_size) + ", device " + std::to_string(device) +
                        ") failed: " + ncclGetErrorString(rc);
      fail_locked(PL_ERR_RUNTIME, msg);
    }
    wait_ready_locked(lock, "communicator set-up (waiting for all " + std::to_string(world_size) + " ranks to join)",
                      deadline);
  } catch (...) {
    release();  // the constructor failed: free what it made, then report
    throw;
  }
}

Comm::~Comm() { release(); }

void Comm::release() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_) {
    cudaSetDevice(device_);
    // Nothing may hang at exit: finalize would wait for peers, so destroy aborts in-flight work.
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (done_) cudaEventDestroy(done_);
  if (default_done_) cudaEventDestroy(default_done_);
  if (stream_) cudaStreamDestroy(stream_);
  done_ = default_done_ = nullptr;
  stream_ = nullptr;
}

ncclResult_t Comm::async_state_locked() {
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  return rc != ncclSuccess ? rc : state;
}

void Comm::fail_locked(PL_ErrorCode code, const std::string& message) {
  if (comm_) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (!aborted_.exchange(true)) abort_reason_ = message;
  fail(code, message);
}

void Comm::wait_ready_locked(std::unique_lock<std::mutex>& lock, const std::string& what, Clock::time_point deadline) {
  for (int round = 0;;) {
    if (!comm_) fail(PL_ERR_RUNTIME, "nccl " + what + ": the communicator was aborted: " + abort_reason_);
    ncclResult_t state = async_state_locked();
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      fail_locked(PL_ERR_RUNTIME, "nccl " + what + " failed: " + ncclGetErrorString(state) +
                                      (last && *last ? std::string(" (") + last + ")" : std::string()));
    }
    if (Clock::now() >= deadline)
      fail_locked(PL_ERR_TIMEOUT, "nccl " + what + " timed out; the communicator was aborted");
    lock.unlock();
    pause(round);
    lock.lock();
  }
}

void Comm::enqueue(const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& body, const std::string& what,
                   Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!comm_) fail(PL_ERR_RUNTIME, what + ": the nccl communicator was aborted: " + abort_reason_);
  check_cuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
  // Buffers written by kernels on the default stream (or blocking streams) are ready first.
  check_cuda(cudaEventRecord(default_done_, cudaStreamLegacy), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, default_done_, 0), "cudaStreamWaitEvent");
  ncclResult_t rc = body(comm_, stream_);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    const char* last = ncclGetLastError(comm_);
    fail_locked(PL_ERR_RUNTIME, what + " failed: " + ncclGetErrorString(rc) +
                                    (last && *last ? std::string(" (") + last + ")" : std::string()));
  }
  wait_ready_locked(lock, what, deadline);
}

void Comm::synchronize(const std::string& what, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!comm_) fail(PL_ERR_RUNTIME, what + ": the nccl communicator was aborted: " + abort_reason_);
  check_cuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
  check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
  for (int round = 0;;) {
    if (!comm_) fail(PL_ERR_RUNTIME, what + ": the nccl communicator was aborted: " + abort_reason_);
    cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      cudaGetLastError();
      fail_locked(PL_ERR_RUNTIME, what + " failed on the GPU: " + cuda_error_text(q));
    }
    ncclResult_t state = async_state_locked();
    if (state != ncclSuccess && state != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      fail_locked(PL_ERR_RUNTIME, what + " failed: " + ncclGetErrorString(state) +
                                      (last && *last ? std::string(" (") + last + ")" : std::string()));
    }
    if (Clock::now() >= deadline) fail_locked(PL_ERR_TIMEOUT, what + " timed out; the communicator was aborted");
    lock.unlock();
    pause(round);
    lock.lock();
  }
}

void Comm::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.exchange(true)) abort_reason_ = reason;
  if (comm_) {
    cudaSetDevice(device_);
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

}  // namespace plrt::nccl
