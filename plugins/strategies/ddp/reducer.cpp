// The reducer: PyTorch DDP's overlap of gradient communication with backward.  When the last
// gradient of a bucket is ready, the bucket is packed and its allreduce (AVG) starts at once, while
// backward goes on producing the next gradients; after_backward launches what is left, waits, and
// unpacks the means into the gradients.
//
// ORDER.  The process group numbers collectives by issue order and every rank must issue the same
// sequence, but ranks may produce gradients in different orders.  So buckets launch strictly in
// index order: a bucket that becomes ready waits until every earlier bucket has launched, and the
// one that completes a prefix launches the whole prefix.
#include "strategy.hpp"

#include <algorithm>
#include <optional>

namespace plrt::ddp {

using plugin::fail;

namespace {

// after_backward waits for a bucket up to the group's timeout plus this grace.  The group bounds
// each collective by its timeout and then spends up to 2 s diagnosing a failure (which rank never
// came, which calls mismatched); waiting a little longer than the timeout lets that precise message
// come back instead of a bare "not complete" from our own wait.
constexpr int64_t kWaitGraceMs = 5000;

std::string message_of(const PL_Strategy& s, const PL_Error* e) {
  const char* m = s.host->error_message(e);
  return m ? m : "(no message)";
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void require_setup(const PL_Strategy& s, const char* fn) {
  if (!s.set_up) fail(PL_ERR_INVALID_ARGUMENT, s.who + ": " + fn + " was called before setup");
}

// Packs bucket b's gradients into its buffer and starts its allreduce.  Caller holds s.m.
void launch(PL_Strategy& s, size_t b, bool early) {
  Bucket& k = s.buckets[b];
  uint8_t* base = static_cast<uint8_t*>(k.buffer.get());
  for (size_t j = 0; j < k.plan.members.size(); ++j) {
    const PL_Tensor& g = s.params[k.plan.members[j]].grad;
    s.dev.copy(base + k.plan.offsets[j], s.dev.device, g.data, g.device,
               static_cast<size_t>(g.numel) * pl_dtype_size(g.dtype),
               s.who + ": packing the grad of " + s.param_name(k.plan.members[j]) + " into " + describe_bucket(s, b));
  }
  PL_Work* w = nullptr;
  check(s.host, s.pg_api->allreduce(s.pg, &k.tensor, PL_REDUCE_AVG, &w),
        s.who + ": starting the gradient allreduce of " + describe_bucket(s, b));
  if (w == nullptr) fail(PL_ERR_INTERNAL, s.who + ": the process group returned no work handle for " + describe_bucket(s, b));
  k.work = w;
  if (b == 0) s.first_launch = Clock::now();  // launches go in index order: bucket 0 is the step's first
  if (early) ++s.stats.early_launches;
}

// Launches every ready bucket whose predecessors have all launched.  Caller holds s.m.
void launch_ready_prefix(PL_Strategy& s) {
  while (s.next_launch < s.buckets.size() && s.buckets[s.next_launch].pending == 0) {
    launch(s, s.next_launch, true);
    ++s.next_launch;
  }
}

}  // namespace

void reset_step_locked(PL_Strategy& s) {
  std::fill(s.ready.begin(), s.ready.end(), 0);
  s.ready_count = 0;
  s.next_launch = 0;
  for (auto& k : s.buckets) k.pending = k.plan.members.size();
}

std::string drain_locked(PL_Strategy& s, int64_t wait_ms) {
  std::string first;
  bool aborted = false;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& k = s.buckets[b];
    if (k.work == nullptr) continue;
    PL_Error* e = s.pg_api->work_wait(k.work, wait_ms);
    if (e != nullptr) {
      int32_t done = 0;
      PL_Error* te = s.pg_api->work_test(k.work, &done);
      if (te != nullptr) s.host->error_destroy(te);
      if (!done && !aborted) {  // work_destroy would wait again: fail it (and the rest) at once
        log_and_drop(s.host, s.who.c_str(), s.pg_api->abort(s.pg), s.who + ": aborting the process group");
        aborted = true;
      }
      if (first.empty()) first = describe_bucket(s, b) + ": " + message_of(s, e);
      s.host->error_destroy(e);
    }
    s.pg_api->work_destroy(k.work);
    k.work = nullptr;
  }
  return first;
}

void on_grad_ready(PL_Strategy& s, size_t i) {
  std::lock_guard<std::mutex> lock(s.m);
  require_setup(s, "on_grad_ready");
  if (i >= s.num_params)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": on_grad_ready: param_index " + std::to_string(i) +
                                      " is out of range: setup registered " + std::to_string(s.num_params) +
                                      " parameters" +
                                      (s.num_params ? " (valid: 0.." + std::to_string(s.num_params - 1) + ")" : ""));
  if (!s.params[i].requires_grad)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": on_grad_ready: " + s.param_name(i) +
                                      " has requires_grad 0 (a buffer): it has no gradient to reduce");
  if (s.ready[i])
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": on_grad_ready was called twice for " + s.param_name(i) +
                                      " in one step; a gradient is ready once per backward, and after_backward "
                                      "ends the step");
  s.ready[i] = 1;
  ++s.ready_count;
  const int64_t b = s.bucket_of[i];
  if (!s.grad_sync || s.pg == nullptr || b < 0) return;  // nothing to communicate
  --s.buckets[static_cast<size_t>(b)].pending;
  launch_ready_prefix(s);
}

void after_backward(PL_Strategy& s) {
  std::lock_guard<std::mutex> lock(s.m);
  require_setup(s, "after_backward");
  if (!s.grad_sync || s.pg == nullptr) {  // no_sync: the gradients accumulate locally
    reset_step_locked(s);
    ++s.stats.steps;
    return;
  }
  // Gradients whose on_grad_ready never came are final now: launch the rest, in order.
  try {
    for (; s.next_launch < s.buckets.size(); ++s.next_launch) launch(s, s.next_launch, false);
  } catch (...) {
    drain_locked(s, s.timeout_ms + kWaitGraceMs);
    reset_step_locked(s);
    throw;
  }
  std::optional<plugin::Failure> failure;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& k = s.buckets[b];
    const auto t0 = Clock::now();
    PL_Error* e = s.pg_api->work_wait(k.work, s.timeout_ms + kWaitGraceMs);
    s.stats.exposed_ms += ms_between(t0, Clock::now());
    if (e != nullptr) {
      int32_t done = 0;
      PL_Error* te = s.pg_api->work_test(k.work, &done);
      if (te != nullptr) s.host->error_destroy(te);
      if (!done) log_and_drop(s.host, s.who.c_str(), s.pg_api->abort(s.pg), s.who + ": aborting the process group");
      if (!failure)
        failure.emplace(s.host->error_code(e), s.who + ": the gradient allreduce of " + describe_bucket(s, b) +
                                                   " failed: " + message_of(s, e));
      s.host->error_destroy(e);
    }
    s.pg_api->work_destroy(k.work);
    k.work = nullptr;
    if (failure) continue;  // the rest are only waited for and freed
    try {
      const uint8_t* base = static_cast<const uint8_t*>(k.buffer.get());
      for (size_t j = 0; j < k.plan.members.size(); ++j) {
        PL_Tensor& g = s.params[k.plan.members[j]].grad;
        s.dev.copy(g.data, g.device, base + k.plan.offsets[j], s.dev.device,
                   static_cast<size_t>(g.numel) * pl_dtype_size(g.dtype),
                   s.who + ": unpacking the averaged grad of " + s.param_name(k.plan.members[j]));
      }
    } catch (const plugin::Failure& f) {
      failure = f;
    }
  }
  if (!s.buckets.empty()) s.stats.allreduce_ms += ms_between(s.first_launch, Clock::now());
  reset_step_locked(s);
  ++s.stats.steps;
  if (failure) throw *failure;
}

void set_grad_sync(PL_Strategy& s, bool enabled) {
  std::lock_guard<std::mutex> lock(s.m);
  if (enabled == s.grad_sync) return;
  if (s.step_active())
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": set_grad_sync(" + (enabled ? "1" : "0") +
                                      ") in the middle of a step (on_grad_ready already came for " +
                                      std::to_string(s.ready_count) +
                                      " parameters); change it before run_step or after after_backward");
  s.grad_sync = enabled;
}

}  // namespace plrt::ddp
