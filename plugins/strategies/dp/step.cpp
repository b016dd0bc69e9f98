// One step of dp/ddp2: run_step (the root's values into the replicas when dirty, then every
// replica's fn at once on its own thread) and after_backward (the replicas' gradients summed into
// the root's, then ddp2's cross-process average).
#include <algorithm>

#include "dp_strategy.hpp"

namespace plrt::dp {

using plugin::fail;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The cpu accelerator has one device, the host (its set_device refuses any index but 0), and the
// cpu "devices" of dp are all host memory: there is nothing to bind a thread to.
bool binds_threads(const DpStrategy& s) { return s.api != nullptr && s.device_type != PL_DEVICE_CPU; }

void bind_thread(const DpStrategy& s, size_t r) {
  if (!binds_threads(s)) return;
  strategy::check(s.host, s.api->set_device(s.acc, s.device_ids[r]),
                  s.who + ": binding the thread of " + s.replica_name(r) + " to " + device_name(s.device_of(r)));
}

void copy_root_to_replicas(DpStrategy& s) {
  for (size_t r = 1; r < s.n(); ++r) {
    PL_Parameter* rep = s.replicas[r];
    for (size_t i = 0; i < s.num_params; ++i) {
      const PL_Tensor& src = s.root[i].value;
      PL_Tensor& dst = rep[i].value;
      s.dev.copy(dst.data, dst.device, src.data, src.device, tensor_bytes(src),
                 s.who + ": run_step: copying the root's " + s.entry_name(i) + " into " + s.replica_name(r));
    }
  }
}

// Replica r's step on the current thread: fn, then (asynchronous accelerators) its device's
// default stream, so that its gradients are complete when the step is over.
void replica_step(const DpStrategy& s, const PL_ReplicaStepFn& fn, size_t r) {
  PL_Error* e = fn.run(fn.user, static_cast<int32_t>(r), static_cast<int32_t>(s.n()), s.device_of(r), s.replicas[r],
                       s.num_params);
  if (!s.synchronous) {
    PL_Error* se = s.api->stream_synchronize(s.acc, nullptr);
    if (e == nullptr) {
      strategy::check(s.host, se, s.replica_name(r) + ": synchronising the default stream after the step");
    } else {
      strategy::log_and_drop(s.host, s.who.c_str(), se, s.replica_name(r) + ": synchronising after a failed step");
    }
  }
  if (e != nullptr) {
    const PL_ErrorCode code = s.host->error_code(e);
    const char* m = s.host->error_message(e);
    std::string message = s.replica_name(r) + ": " + (m ? m : "(no message)");
    s.host->error_destroy(e);
    fail(code == PL_ERR_OK ? PL_ERR_INTERNAL : code, std::move(message));
  }
}

// Turns what the replicas threw into the error of the lowest failing one; the others are logged.
void report(const DpStrategy& s, const std::vector<std::exception_ptr>& errors) {
  std::exception_ptr first = nullptr;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    if (!first) {
      first = errors[r];
      continue;
    }
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      plugin::logf(s.host, PL_LOG_DEBUG, s.who.c_str(), "run_step: %s also failed: %s", s.replica_name(r).c_str(),
                   e.what());
    } catch (...) {
    }
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const plugin::Failure&) {
    throw;
  } catch (const std::exception& e) {  // not from fn (an allocation, say): still say which replica
    const size_t r = static_cast<size_t>(std::find(errors.begin(), errors.end(), first) - errors.begin());
    fail(PL_ERR_INTERNAL, s.replica_name(r) + ": " + e.what());
  }
}

// A buffer of `bytes` on `device` (host memory for a cpu-type device), reused across steps.
Scratch& scratch_for(DpStrategy& s, PL_Device device, size_t bytes) {
  auto it = std::find_if(s.scratch.begin(), s.scratch.end(), [&](const Scratch& b) {
    return b.device.type == device.type && b.device.index == device.index;
  });
  if (it != s.scratch.end() && it->bytes >= bytes) return *it;
  if (it == s.scratch.end()) {
    s.scratch.push_back(Scratch{device, device.type == PL_DEVICE_CPU, nullptr, 0});
    it = s.scratch.end() - 1;
  }
  Scratch& b = *it;
  // Every gradient fits in the largest one: one allocation for the whole run.
  size_t largest = bytes;
  for (size_t i = 0; i < s.num_params; ++i)
    if (s.root[i].requires_grad) largest = std::max(largest, tensor_bytes(s.root[i].grad));
  if (b.ptr != nullptr) {
    PL_Error* e = b.host ? s.api->free_host(s.acc, b.ptr) : s.api->free_memory(s.acc, b.device, b.ptr);
    b.ptr = nullptr;
    b.bytes = 0;
    strategy::check(s.host, e, s.who + ": freeing a scratch buffer");
  }
  const std::string what = s.who + ": allocating a " + std::to_string(largest) + "-byte scratch buffer on " +
                           device_name(device) + " for the replicas' gradients";
  void* p = nullptr;
  if (b.host) {
    if (s.api->alloc_host == nullptr || s.api->free_host == nullptr)
      fail(PL_ERR_UNSUPPORTED, what + ": the accelerator lacks alloc_host/free_host");
    strategy::check(s.host, s.api->alloc_host(s.acc, largest, &p), what);
  } else {
    strategy::check(s.host, s.api->alloc(s.acc, device, largest, &p), what);
  }
  if (p == nullptr) fail(PL_ERR_RESOURCE, what + ": the accelerator returned NULL");
  b.ptr = p;
  b.bytes = largest;
  return b;
}

// root.grad[i] += replica r's grad[i].  Another device's gradient goes through a scratch buffer on
// the root's, since a kernel reads one device's memory.
void add_replica_grad(DpStrategy& s, size_t r, size_t i) {
  PL_Tensor y = s.root[i].grad;
  PL_Tensor x = s.replicas[r][i].grad;
  const std::string what = s.who + ": after_backward: adding the grad of " + s.entry_name(i) + " of " +
                           s.replica_name(r) + " into the root's";
  if (!same_memory(x.device, y.device)) {
    Scratch& b = scratch_for(s, y.device, tensor_bytes(x));
    s.dev.copy(b.ptr, y.device, x.data, x.device, tensor_bytes(x),
               what + " (copying it to " + device_name(y.device) + ")");
    x.data = b.ptr;
    x.device = y.device;
  }
  strategy::check(s.host, s.api->axpy(s.acc, &y, 1.0, &x, nullptr), what);
}

}  // namespace

void free_scratch(DpStrategy& s) noexcept {
  for (auto& b : s.scratch) {
    if (b.ptr == nullptr) continue;
    PL_Error* e = b.host ? s.api->free_host(s.acc, b.ptr) : s.api->free_memory(s.acc, b.device, b.ptr);
    try {
      strategy::log_and_drop(s.host, s.who.c_str(), e,
                             "freeing a scratch buffer of " + std::to_string(b.bytes) + " bytes");
    } catch (...) {  // the message could not be built: still free the error
      if (e != nullptr) s.host->error_destroy(e);
    }
  }
  s.scratch.clear();
}

void run_step(DpStrategy& s, const PL_ReplicaStepFn& fn) {
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (s.in_step) fail(PL_ERR_INVALID_ARGUMENT, s.who + ": run_step was called from inside a replica's step function");
    require_replicas_locked(s, "run_step");
    bind_thread(s, 0);
    if (s.dirty && s.n() > 1) {
      const auto t0 = Clock::now();
      copy_root_to_replicas(s);
      s.stats.broadcast_ms += ms_since(t0);
    }
    s.dirty = false;
    if (!s.pool.running())
      s.pool.start(s.n(), [&s](size_t r) { bind_thread(s, r); });  // each worker binds itself, once
    s.in_step = true;
  }
  std::vector<std::exception_ptr> errors = s.pool.run([&](size_t r) { replica_step(s, fn, r); });
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.in_step = false;
  }
  report(s, errors);
}

void after_backward(DpStrategy& s) {
  std::lock_guard<std::mutex> lock(s.m);
  if (s.in_step)
    fail(PL_ERR_INVALID_ARGUMENT, s.who +
                                      ": after_backward was called from inside a replica's step function; the "
                                      "host calls it once run_step has returned");
  require_replicas_locked(s, "after_backward");
  if (s.n() > 1) {
    const auto t0 = Clock::now();
    bind_thread(s, 0);
    for (size_t r = 1; r < s.n(); ++r)
      for (size_t i = 0; i < s.num_params; ++i)
        if (s.root[i].requires_grad && s.root[i].grad.numel > 0) add_replica_grad(s, r, i);
    if (!s.synchronous)
      strategy::check(s.host, s.api->stream_synchronize(s.acc, nullptr),
                      s.who + ": after_backward: synchronising the root's device");
    s.stats.reduce_ms += ms_since(t0);
  }
  if (s.inner != nullptr) {  // ddp2: the average across processes (the inner skips it when sync is off)
    const auto t0 = Clock::now();
    ddp::after_backward(*s.inner);
    if (s.grad_sync && s.world > 1) s.stats.allreduce_ms += ms_since(t0);
  }
  ++s.stats.steps;
}

}  // namespace plrt::dp
