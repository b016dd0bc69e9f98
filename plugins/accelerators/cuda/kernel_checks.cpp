// KernelChecks: pooled check slots, synchronous and deferred reporting (see kernel_checks.hpp).
#include "kernel_checks.hpp"

#include <atomic>
#include <cstring>

namespace plrt::cuda {

namespace {

constexpr int kBlockSlots = 64;
// Deferred checks kept at most; beyond, a launch first waits for the oldest one (and may report
// its error), so that a program that never synchronises does not grow without bound.
constexpr size_t kMaxPending = 1024;

// The record as the kernel left it; the caller has seen its launch complete.
CheckRecord read_record(const CheckRecord* r) {
  std::atomic_thread_fence(std::memory_order_acquire);
  const volatile CheckRecord* v = r;
  CheckRecord out{};
  out.key = v->key;
  out.p0 = v->p0;
  out.p1 = v->p1;
  return out;
}

}  // namespace

KernelChecks::~KernelChecks() {
  // Nothing was ever checked (an instance that only counted or probed the devices, as
  // pl_find_usable_devices makes one): touch no CUDA call at all.  cudaSetDevice below would make
  // the device's primary context in this process (CUDA 12 and later make it there), and the
  // probe's promise is that only its child ever makes one.
  if (pools_.empty() && pending_.empty()) return;
  std::vector<std::string> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      lost = harvest_locked(true);
    } catch (...) {  // a destructor reports nothing further
    }
  }
  for (const auto& m : lost)
    plrt::plugin::logf(host_, PL_LOG_WARN, "cuda",
                       "%s (found on the GPU by a call whose error was never reported: no synchronisation "
                       "followed it before the accelerator was destroyed)",
                       m.c_str());
  int current = -1;
  const bool have_current = cudaGetDevice(&current) == cudaSuccess;
  for (auto& [device, pool] : pools_) {
    if (cudaSetDevice(device) != cudaSuccess) continue;  // e.g. the CUDA runtime is already shut down
    for (auto& b : pool.blocks) {
      cudaFree(b.slots);
      cudaFreeHost(b.records);
    }
    for (cudaEvent_t e : pool.events) cudaEventDestroy(e);
  }
  for (auto& p : pending_) cudaEventDestroy(p.done);  // only after a failed harvest
  if (have_current) cudaSetDevice(current);
  cudaGetLastError();
}

void KernelChecks::grow(Pool& pool, cudaStream_t stream) {
  Block b;
  const size_t slot_bytes = kBlockSlots * sizeof(CheckSlot), record_bytes = kBlockSlots * sizeof(CheckRecord);
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&b.slots), slot_bytes), "cudaMalloc (kernel check slots)");
  // Zero is the slots' idle state.  Stream-ordered, then waited for once: the block's slots may be
  // used next on other streams.
  cudaError_t rc = cudaMemsetAsync(b.slots, 0, slot_bytes, stream);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
  if (rc == cudaSuccess)
    rc = cudaHostAlloc(reinterpret_cast<void**>(&b.records), record_bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (rc == cudaSuccess) {
    std::memset(static_cast<void*>(b.records), 0xff, record_bytes);
    rc = cudaHostGetDevicePointer(reinterpret_cast<void**>(&b.records_dev), b.records, 0);
  }
  if (rc != cudaSuccess) {
    cudaFree(b.slots);
    if (b.records) cudaFreeHost(b.records);
    check_cuda(rc, "setting up kernel check slots (cudaMemsetAsync / cudaHostAlloc mapped)");
  }
  const int base = static_cast<int>(pool.blocks.size()) * kBlockSlots;
  pool.blocks.push_back(b);
  for (int i = kBlockSlots - 1; i >= 0; --i) pool.free.push_back(base + i);  // popped lowest first
}

KernelChecks::Ticket KernelChecks::acquire(int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Pool& pool = pools_[device];
  if (pool.free.empty()) grow(pool, stream);
  const int index = pool.free.back();
  pool.free.pop_back();
  const Block& b = pool.blocks[static_cast<size_t>(index / kBlockSlots)];
  Ticket t;
  t.device = device;
  t.index = index;
  t.ref.slot = b.slots + index % kBlockSlots;
  t.ref.record = b.records_dev + index % kBlockSlots;
  t.record = b.records + index % kBlockSlots;
  return t;
}

void KernelChecks::release_locked(const Ticket& t) { pools_[t.device].free.push_back(t.index); }

void KernelChecks::release(const Ticket& t) {
  std::lock_guard<std::mutex> lock(mu_);
  release_locked(t);
}

void KernelChecks::defer(const Ticket& t, cudaStream_t stream, const char* op, Describe describe) {
  cudaEvent_t oldest = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pool& pool = pools_[t.device];
    cudaEvent_t ev = nullptr;
    if (!pool.events.empty()) {
      ev = pool.events.back();
      pool.events.pop_back();
    } else {
      check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), std::string(op) + ": cudaEventCreate");
    }
    const cudaError_t rc = cudaEventRecord(ev, stream);
    if (rc != cudaSuccess) {
      pool.events.push_back(ev);
      check_cuda(rc, std::string(op) + ": cudaEventRecord");  // the kernel's state is unknown: the ticket is lost
    }
    pending_.push_back(Pending{t, ev, op, std::move(describe)});
    if (pending_.size() > kMaxPending) oldest = pending_.front().done;
  }
  if (oldest != nullptr) {
    cudaEventSynchronize(oldest);  // errors surface in report()
    report("a kernel call (more than 1024 checks were waiting for a synchronisation)");
  }
}

void KernelChecks::report(const char* where) {
  std::vector<std::string> errors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    errors = harvest_locked(false);
  }
  if (errors.empty()) return;
  for (size_t i = 1; i < errors.size(); ++i)
    plrt::plugin::logf(host_, PL_LOG_ERROR, "cuda", "%s (found on the GPU as well; only the first error is returned)",
                       errors[i].c_str());
  fail(PL_ERR_INVALID_ARGUMENT, errors[0] + " (found on the GPU after the call returned; reported at " + where + ")");
}

std::vector<std::string> KernelChecks::harvest_locked(bool wait_all) {
  std::vector<std::string> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const cudaError_t st = wait_all ? cudaEventSynchronize(it->done) : cudaEventQuery(it->done);
    if (st == cudaErrorNotReady) {
      ++it;
      continue;
    }
    if (st != cudaSuccess) {
      if (wait_all) {  // the destructor: give up on this one
        cudaGetLastError();
        ++it;
        continue;
      }
      check_cuda(st, "cudaEventQuery (a deferred kernel check)");
    }
    const CheckRecord rec = read_record(it->ticket.record);
    if (rec.key != kNoError) out.push_back(it->op + ": " + it->describe(rec));
    pools_[it->ticket.device].events.push_back(it->done);
    release_locked(it->ticket);
    it = pending_.erase(it);
  }
  return out;
}

}  // namespace plrt::cuda
