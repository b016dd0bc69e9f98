// The reducer's step: ready tracking, strict start order, the stages, the waits.  See reducer.hpp.
//
// ORDER.  Ranks may produce gradients in different orders, but must issue the same collectives in
// the same order.  So buckets start strictly in index order: a bucket that becomes full waits until
// every earlier bucket has started, and the gradient that completes a prefix starts the whole
// prefix.  Later stages run in finish_step, bucket by bucket (bucket_comm.hpp).
#include "reducer.hpp"

#include <algorithm>
#include <optional>
#include <utility>

namespace plrt::reducer {

using plugin::fail;
using strategy::check;

namespace {

// finish_step waits for a bucket up to the group's timeout plus this grace.  The group bounds each
// collective by its timeout and then spends up to 2 s diagnosing a failure (which rank never came,
// which calls mismatched); waiting a little longer lets that precise message come back instead of a
// bare "not complete" from our own wait.
constexpr int64_t kWaitGraceMs = 5000;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

size_t tensor_bytes(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

bool has_batched_copies(const PL_AcceleratorApi* a) {
  return a != nullptr && PL_HAS_FIELD(PL_AcceleratorApi, a, unpack) && a->pack != nullptr && a->unpack != nullptr;
}

}  // namespace

void BucketComm::finish(Reducer& r, Bucket& b) {
  if (!b.in_place) r.unpack(b);
}

const strategy::Group& BucketComm::group(const Reducer& r) const { return on_ != nullptr ? *on_ : r.group(); }

const strategy::Group& BucketComm::work_group(const Reducer& r, const Bucket& b) const {
  (void)b;
  return group(r);
}

PL_Work* Allreduce::start(Reducer& r, Bucket& b) {
  PL_Work* w = nullptr;
  const strategy::Group& g = group(r);
  check(r.device().host, g.api()->allreduce(g.get(), &b.flat, op_, &w),
        r.who() + ": starting the gradient allreduce of " + r.describe(b));
  if (w == nullptr) fail(PL_ERR_INTERNAL, r.who() + ": the process group returned no work handle for " + r.describe(b));
  return w;
}

Reducer::Reducer(std::string who, const strategy::DeviceContext& dev, const strategy::Group& group, BucketComm& comm)
    : who_(std::move(who)), dev_(dev), group_(group), comm_(comm) {}

Reducer::~Reducer() {
  try {
    teardown(std::min<int64_t>(group_.timeout_ms(), 10000));
  } catch (...) {  // a message could not be built: nothing more to do
  }
}

void Reducer::require_setup(const char* fn) const {
  if (!set_up_) fail(PL_ERR_INVALID_ARGUMENT, who_ + ": " + fn + " was called before setup");
}

std::string Reducer::describe(const Bucket& b) const {
  const auto& p = b.plan;
  return "bucket " + std::to_string(b.index) + " of " + std::to_string(buckets_.size()) + " (" +
         std::to_string(p.members.size()) + (p.members.size() == 1 ? " parameter, " : " parameters, ") +
         std::to_string(p.bytes) + " bytes of " + pl_dtype_name(p.dtype) + ")";
}

void Reducer::setup(PL_Parameter* params, size_t num_params, const std::vector<std::string>& names, size_t first_cap,
                    size_t cap) {
  std::lock_guard<std::mutex> lock(m_);
  std::vector<PlanInput> in;
  for (size_t k = num_params; k-- > 0;) {  // reverse registration order
    const PL_Parameter& p = params[k];
    if (pl_parameter_kind(&p) == PL_PARAM_TRAINABLE && p.grad.numel > 0)
      in.push_back({k, tensor_bytes(p.grad), p.grad.dtype, p.grad.device});
  }
  auto plan = plan_buckets(in, first_cap, cap);
  params_ = params;
  num_params_ = num_params;
  names_ = names;
  bucket_of_.assign(num_params, -1);
  buckets_.clear();
  buckets_.reserve(plan.size());  // never grows again: collectives borrow &bucket.flat
  for (size_t b = 0; b < plan.size(); ++b) {
    Bucket k;
    k.index = b;
    k.plan = std::move(plan[b]);
    k.pending = k.plan.members.size();
    const size_t elem = pl_dtype_size(k.plan.dtype);
    k.numel = static_cast<int64_t>(k.plan.bytes / elem);
    for (size_t j = 0; j < k.plan.members.size(); ++j) {
      bucket_of_[k.plan.members[j]] = static_cast<int64_t>(b);
      k.offsets.push_back(static_cast<int64_t>(k.plan.offsets[j] / elem));
    }
    buckets_.push_back(std::move(k));
  }
  for (auto& k : buckets_) {
    for (size_t i : k.plan.members) k.parts.push_back(params[i].grad);
    k.what = who_ + ": the gradient " + comm_.name() + " of " + describe(k);
  }
  try {
    if (group_) allocate_buffers_locked();  // one rank: the layout (and its statistics) without the memory
  } catch (...) {
    buckets_.clear();
    slots_.clear();
    params_ = nullptr;
    num_params_ = 0;
    throw;
  }
  ready_.assign(num_params, 0);
  ready_count_ = 0;
  next_start_ = 0;
  set_up_ = true;
  const PL_Host* host = dev_.host;
  if (host->log_enabled(host->ctx, PL_LOG_DEBUG))
    for (const auto& k : buckets_)
      plugin::logf(host, PL_LOG_DEBUG, who_.c_str(), "bucket %zu: %zu parameters, %zu bytes of %s, first '%s'; %s",
                   k.index, k.plan.members.size(), k.plan.bytes, pl_dtype_name(k.plan.dtype),
                   names_[k.plan.members.front()].c_str(), comm_.name().c_str());
}

// Every bucket's flat buffer (its own, or a shared slot; none when the comm works in place), padded
// as the comm asks and the padding zeroed, then the comm's per-bucket scratch.
void Reducer::allocate_buffers_locked() {
  const size_t slots = comm_.buffer_slots();
  auto padded_bytes = [&](const Bucket& k) {
    return static_cast<size_t>(comm_.padded_numel(k.numel)) * pl_dtype_size(k.plan.dtype);
  };
  std::vector<size_t> users;  // the buckets with a flat buffer, in order
  for (auto& k : buckets_) {
    k.in_place = k.plan.members.size() == 1 && comm_.in_place(k);
    k.slot_prev = -1;
    if (!k.in_place) users.push_back(k.index);
  }
  slots_.clear();
  std::vector<size_t> slot_of(buckets_.size(), 0);
  if (slots > 0 && !users.empty()) {  // slot j: the largest of the buckets that use it
    const size_t n = std::min(slots, users.size());
    std::vector<size_t> size(n, 0);
    for (size_t u = 0; u < users.size(); ++u) {
      Bucket& k = buckets_[users[u]];
      slot_of[k.index] = u % n;
      if (u >= n) k.slot_prev = static_cast<int64_t>(users[u - n]);
      size[u % n] = std::max(size[u % n], padded_bytes(k));
    }
    for (size_t j = 0; j < n; ++j)
      slots_.emplace_back(dev_, size[j],
                          who_ + ": allocating shared bucket buffer " + std::to_string(j + 1) + " of " +
                              std::to_string(n) + " (" + std::to_string(size[j]) + " bytes)");
  }
  for (auto& k : buckets_) {
    if (k.in_place) {
      k.flat = PL_Tensor{};
      comm_.prepare(*this, k);
      continue;
    }
    const size_t bytes = padded_bytes(k);
    void* mem = nullptr;
    if (slots > 0) {
      mem = slots_[slot_of[k.index]].get();
    } else {
      k.buffer = strategy::DeviceMemory(dev_, bytes, who_ + ": allocating the buffer of " + describe(k));
      mem = k.buffer.get();
    }
    k.flat = flat_view(mem, k.plan, dev_.device);
    k.flat.numel = k.flat.shape[0] = comm_.padded_numel(k.numel);
    if (bytes > k.plan.bytes && dev_.api != nullptr && dev_.api->fill != nullptr) {
      PL_Tensor pad = k.flat;
      pad.data = static_cast<uint8_t*>(mem) + k.plan.bytes;
      pad.numel = pad.shape[0] = k.flat.numel - k.numel;
      check(dev_.host, dev_.api->fill(dev_.acc, &pad, 0.0, nullptr), who_ + ": zeroing the padding of " + describe(k));
    }
    comm_.prepare(*this, k);
  }
}

PL_Tensor sub_view(const PL_Tensor& t, int64_t begin, int64_t count) {
  PL_Tensor v = t;
  v.data = static_cast<uint8_t*>(t.data) + static_cast<size_t>(begin) * pl_dtype_size(t.dtype);
  v.ndim = 1;
  v.numel = v.shape[0] = count;
  return v;
}

void pack_parts(const strategy::DeviceContext& dev, std::vector<PL_Tensor>& parts, const std::vector<int64_t>& offsets,
                PL_Tensor& flat, const std::string& what) {
  const PL_AcceleratorApi* a = dev.api;
  if (has_batched_copies(a)) {
    check(dev.host, a->pack(dev.acc, parts.data(), parts.size(), offsets.data(), &flat, nullptr), what);
    return;
  }
  const size_t elem = pl_dtype_size(flat.dtype);
  uint8_t* base = static_cast<uint8_t*>(flat.data);
  for (size_t j = 0; j < parts.size(); ++j)
    dev.copy(base + static_cast<size_t>(offsets[j]) * elem, flat.device, parts[j].data, parts[j].device,
             tensor_bytes(parts[j]), what);
}

void unpack_parts(const strategy::DeviceContext& dev, const PL_Tensor& flat, const std::vector<int64_t>& offsets,
                  std::vector<PL_Tensor>& parts, const std::string& what) {
  const PL_AcceleratorApi* a = dev.api;
  if (has_batched_copies(a)) {
    check(dev.host, a->unpack(dev.acc, &flat, offsets.data(), parts.data(), parts.size(), nullptr), what);
    return;
  }
  const size_t elem = pl_dtype_size(flat.dtype);
  const uint8_t* base = static_cast<const uint8_t*>(flat.data);
  for (size_t j = 0; j < parts.size(); ++j)
    dev.copy(parts[j].data, parts[j].device, base + static_cast<size_t>(offsets[j]) * elem, flat.device,
             tensor_bytes(parts[j]), what);
}

void Reducer::pack(Bucket& b) const {
  pack_parts(dev_, b.parts, b.offsets, b.flat, who_ + ": packing the grads of " + describe(b));
}

void Reducer::unpack(Bucket& b) const {
  unpack_parts(dev_, b.flat, b.offsets, b.parts, who_ + ": unpacking the result of " + describe(b));
}

void Reducer::start_locked(size_t b, bool early) {
  Bucket& k = buckets_[b];
  // A shared buffer: the bucket that used it last must be finished first.
  if (k.slot_prev >= 0) drive_locked(buckets_[static_cast<size_t>(k.slot_prev)]);
  if (!k.in_place) pack(k);
  k.stage = 0;
  k.work = comm_.start(*this, k);
  ++k.stage;
  if (b == 0) first_start_ = Clock::now();  // starts go in index order: bucket 0 is the step's first
  if (early) ++stats_.early_launches;
}

void Reducer::start_ready_prefix_locked() {
  while (next_start_ < buckets_.size() && buckets_[next_start_].pending == 0) {
    start_locked(next_start_, true);
    ++next_start_;
  }
}

void Reducer::on_grad_ready(size_t i) {
  std::lock_guard<std::mutex> lock(m_);
  require_setup("on_grad_ready");
  if (i >= num_params_)
    fail(PL_ERR_INVALID_ARGUMENT, who_ + ": on_grad_ready: param_index " + std::to_string(i) +
                                      " is out of range: setup registered " + std::to_string(num_params_) +
                                      " parameters" +
                                      (num_params_ ? " (valid: 0.." + std::to_string(num_params_ - 1) + ")" : ""));
  const std::string name = "parameter '" + names_[i] + "' (index " + std::to_string(i) + ")";
  const PL_ParamKind kind = pl_parameter_kind(&params_[i]);
  if (kind != PL_PARAM_TRAINABLE)
    fail(PL_ERR_INVALID_ARGUMENT, who_ + ": on_grad_ready: " + name + " has requires_grad 0 (" +
                                      (kind == PL_PARAM_FROZEN ? "a frozen parameter" : "a buffer") +
                                      "): it has no gradient to reduce");
  if (ready_[i])
    fail(PL_ERR_INVALID_ARGUMENT, who_ + ": on_grad_ready was called twice for " + name +
                                      " in one step; a gradient is ready once per backward, and after_backward "
                                      "ends the step");
  ready_[i] = 1;
  ++ready_count_;
  const int64_t b = bucket_of_[i];
  if (!grad_sync_ || !group_ || b < 0) return;  // nothing to communicate
  --buckets_[static_cast<size_t>(b)].pending;
  start_ready_prefix_locked();
}

void Reducer::drive_locked(Bucket& k) {
  if (k.done) return;
  while (k.work != nullptr) {
    const auto t0 = Clock::now();
    try {
      // Frees the work; on failure aborts the group when the work still runs, and throws
      // "<k.what> failed: <the group's message>".
      const strategy::Group& g = comm_.work_group(*this, k);
      g.wait(std::exchange(k.work, nullptr), g.timeout_ms() + kWaitGraceMs, k.what);
    } catch (...) {
      stats_.exposed_ms += ms_between(t0, Clock::now());
      throw;
    }
    stats_.exposed_ms += ms_between(t0, Clock::now());
    k.work = comm_.next(*this, k);
    if (k.work != nullptr) ++k.stage;
  }
  k.done = true;
  comm_.finish(*this, k);
}

std::string Reducer::drain_locked(int64_t wait_ms) {
  std::string first;
  std::vector<const strategy::Group*> aborted;
  for (auto& k : buckets_) {
    if (k.work == nullptr) continue;
    const strategy::Group& g = comm_.work_group(*this, k);
    PL_Error* e = g.api()->work_wait(k.work, wait_ms);
    if (e != nullptr) {
      int32_t done = 0;
      PL_Error* te = g.api()->work_test(k.work, &done);
      if (te != nullptr) dev_.host->error_destroy(te);
      // work_destroy would wait again: fail it (and the rest on its group) at once
      if (!done && std::find(aborted.begin(), aborted.end(), &g) == aborted.end()) {
        g.abort();
        aborted.push_back(&g);
      }
      if (first.empty()) {
        const char* m = dev_.host->error_message(e);
        first = describe(k) + ": " + (m ? m : "(no message)");
      }
      dev_.host->error_destroy(e);
    }
    g.api()->work_destroy(k.work);
    k.work = nullptr;
  }
  return first;
}

void Reducer::reset_step_locked() {
  std::fill(ready_.begin(), ready_.end(), 0);
  ready_count_ = 0;
  next_start_ = 0;
  for (auto& k : buckets_) {
    k.pending = k.plan.members.size();
    k.stage = 0;
    k.done = false;
  }
}

void Reducer::finish_step() {
  std::lock_guard<std::mutex> lock(m_);
  require_setup("after_backward");
  if (!grad_sync_ || !group_) {  // no_sync: the gradients accumulate locally
    reset_step_locked();
    ++stats_.steps;
    return;
  }
  std::optional<plugin::Failure> failure;
  try {
    // Gradients whose on_grad_ready never came are final now: start the rest, in order.
    for (; next_start_ < buckets_.size(); ++next_start_) start_locked(next_start_, false);
  } catch (const plugin::Failure& f) {
    failure = f;
  }
  for (auto& k : buckets_) {
    if (failure) break;
    try {
      drive_locked(k);
    } catch (const plugin::Failure& f) {
      failure = f;
    }
  }
  if (failure) {  // the rest are only waited for (bounded) and freed
    drain_locked(group_.timeout_ms() + kWaitGraceMs);
    reset_step_locked();
    ++stats_.steps;
    throw *failure;
  }
  if (!buckets_.empty()) stats_.comm_ms += ms_between(first_start_, Clock::now());
  reset_step_locked();
  ++stats_.steps;
}

void Reducer::set_grad_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(m_);
  if (enabled == grad_sync_) return;
  if (ready_count_ > 0 || next_start_ > 0)
    fail(PL_ERR_INVALID_ARGUMENT, who_ + ": set_grad_sync(" + (enabled ? "1" : "0") +
                                      ") in the middle of a step (on_grad_ready already came for " +
                                      std::to_string(ready_count_) +
                                      " parameters); change it before run_step or after after_backward");
  grad_sync_ = enabled;
}

std::string Reducer::teardown(int64_t wait_ms) {
  std::lock_guard<std::mutex> lock(m_);
  std::string failure = group_ ? drain_locked(wait_ms) : std::string();
  reset_step_locked();
  buckets_.clear();
  slots_.clear();
  bucket_of_.clear();
  ready_.clear();
  params_ = nullptr;
  num_params_ = 0;
  set_up_ = false;
  return failure;
}

bool Reducer::grad_sync() const {
  std::lock_guard<std::mutex> lock(m_);
  return grad_sync_;
}
bool Reducer::set_up() const {
  std::lock_guard<std::mutex> lock(m_);
  return set_up_;
}
bool Reducer::step_active() const {
  std::lock_guard<std::mutex> lock(m_);
  return ready_count_ > 0 || next_start_ > 0;
}
size_t Reducer::ready_count() const {
  std::lock_guard<std::mutex> lock(m_);
  return ready_count_;
}
ReducerStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  return stats_;
}
size_t Reducer::num_buckets() const {
  std::lock_guard<std::mutex> lock(m_);
  return buckets_.size();
}
size_t Reducer::bucket_bytes() const {
  std::lock_guard<std::mutex> lock(m_);
  size_t total = 0;
  for (const auto& k : buckets_) total += k.plan.bytes;
  return total;
}
size_t Reducer::buffer_bytes() const {
  std::lock_guard<std::mutex> lock(m_);
  size_t total = 0;
  for (const auto& s : slots_) total += s.bytes();
  for (const auto& k : buckets_) total += k.buffer.bytes();
  return total;
}
int64_t Reducer::bucket_of(size_t i) const {
  std::lock_guard<std::mutex> lock(m_);
  return i < bucket_of_.size() ? bucket_of_[i] : -1;
}

}  // namespace plrt::reducer
