// Horovod's tensor fusion with its negotiation (fusion.hpp says the rule and its cost).
#include "fusion.hpp"

#include <algorithm>

#include "plugin_support.hpp"
#include "reducer.hpp"  // pack_parts, unpack_parts, sub_view

namespace plrt::horovod {

using plugin::fail;
using strategy::check;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kSlots = 2;  // fusion buffers per dtype in flight at once

size_t bytes_of(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

bool on(const PL_Tensor& t, PL_Device d) { return t.device.type == d.type && t.device.index == d.index; }

}  // namespace

Fusion::Fusion(FusionConfig cfg, const strategy::DeviceContext& dev, const strategy::Group& data,
               const strategy::Group& control)
    : cfg_(std::move(cfg)), dev_(dev), data_(data), control_(control) {}

Fusion::~Fusion() {
  const std::string failure = teardown(0);
  (void)failure;  // the strategy's teardown reported it
}

void Fusion::setup(PL_Parameter* params, size_t n, const std::vector<std::string>& names) {
  entries_.clear();
  opens_.clear();
  open_of_.clear();
  entry_of_.assign(n, -1);
  for (size_t i = n; i-- > 0;) {  // reverse registration order: the order backward usually reports
    const PL_Parameter& p = params[i];
    if (pl_parameter_kind(&p) != PL_PARAM_TRAINABLE || p.grad.numel == 0) continue;
    if (!on(p.grad, dev_.device))  // a lone gradient is allreduced in place, on the group's device
      fail(PL_ERR_INVALID_ARGUMENT, cfg_.who + ": setup: the gradient of parameter '" + names[i] +
                                        "' is not on this process's device (" + std::to_string(dev_.device.type) + ":" +
                                        std::to_string(dev_.device.index) +
                                        "): horovod reduces gradients on the device it drives");
    entry_of_[i] = static_cast<int64_t>(entries_.size());
    entries_.push_back({i, p.grad, bytes_of(p.grad)});
  }
  names_ = names;
  for (const Entry& e : entries_) {
    auto it = std::find_if(opens_.begin(), opens_.end(), [&](const Open& o) { return o.dtype == e.grad.dtype; });
    if (it == opens_.end()) {
      opens_.emplace_back();
      opens_.back().dtype = e.grad.dtype;
      it = opens_.end() - 1;
    }
    open_of_.push_back(static_cast<int>(it - opens_.begin()));
    if (cfg_.threshold > 0 && e.bytes < cfg_.threshold)  // it may be fused: the buffer must hold it
      it->slot_bytes = std::min(cfg_.threshold, it->slot_bytes + e.bytes);
  }
  flags_.assign(entries_.size() + 1, 0);
  agreed_.assign(entries_.size(), 0);
  {
    std::lock_guard<std::mutex> lock(m_);
    ready_.assign(entries_.size(), 0);
    ready_count_ = 0;
    backward_over_ = step_started_ = step_done_ = stop_ = false;
    error_.clear();
  }
  if (cfg_.world > 1 && data_ && !entries_.empty()) thread_ = std::thread([this] { loop(); });
}

void Fusion::on_grad_ready(size_t index) {
  std::lock_guard<std::mutex> lock(m_);
  if (!error_.empty()) fail(PL_ERR_RUNTIME, cfg_.who + ": the gradient fusion failed earlier: " + error_);
  if (index >= entry_of_.size())
    fail(PL_ERR_INVALID_ARGUMENT, cfg_.who + ": on_grad_ready: index " + std::to_string(index) +
                                      " is out of range (setup registered " + std::to_string(entry_of_.size()) +
                                      " parameters)");
  const int64_t e = entry_of_[index];
  if (!grad_sync_ || e < 0) return;  // accumulating, or nothing to reduce
  if (backward_over_)
    fail(PL_ERR_INVALID_ARGUMENT,
         cfg_.who + ": on_grad_ready for parameter '" + names_[index] + "' came after after_backward");
  if (ready_[static_cast<size_t>(e)])
    fail(PL_ERR_INVALID_ARGUMENT, cfg_.who + ": the gradient of parameter '" + names_[index] + "' (index " +
                                      std::to_string(index) + ") was reported ready twice in one step");
  ready_[static_cast<size_t>(e)] = 1;
  ++ready_count_;
  step_started_ = true;
  cv_.notify_all();
}

void Fusion::finish_step() {
  std::unique_lock<std::mutex> lock(m_);
  if (!error_.empty()) fail(PL_ERR_RUNTIME, cfg_.who + ": the gradient fusion failed earlier: " + error_);
  auto reset = [&] {
    std::fill(ready_.begin(), ready_.end(), 0);
    ready_count_ = 0;
    backward_over_ = step_started_ = step_done_ = false;
  };
  if (!grad_sync_) return reset();
  ++stats_.synced_steps;
  if (!thread_.joinable()) return reset();  // one rank: its gradients are the result
  std::fill(ready_.begin(), ready_.end(), 1);
  ready_count_ = ready_.size();
  backward_over_ = step_started_ = true;
  cv_.notify_all();
  const auto t0 = Clock::now();
  // The thread's every collective is bounded by its group's timeout; this bound is a backstop.
  const auto bound = std::chrono::milliseconds(control_.timeout_ms() + data_.timeout_ms() + 10000);
  if (!done_cv_.wait_for(lock, bound, [&] { return step_done_; })) {
    lock.unlock();
    control_.abort();
    data_.abort();
    fail(PL_ERR_TIMEOUT, cfg_.who + ": after_backward: the gradient fusion did not finish in " +
                             std::to_string(bound.count()) + " ms; its groups were aborted");
  }
  stats_.exposed_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  reset();
  if (!error_.empty()) fail(PL_ERR_RUNTIME, cfg_.who + ": after_backward: " + error_);
}

void Fusion::set_grad_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(m_);
  if (ready_count_ > 0 && enabled != grad_sync_)
    fail(PL_ERR_INVALID_ARGUMENT, cfg_.who + ": set_grad_sync during a step (" + std::to_string(ready_count_) +
                                      " gradients reported); call it before backward");
  grad_sync_ = enabled;
}

bool Fusion::grad_sync() const {
  std::lock_guard<std::mutex> lock(m_);
  return grad_sync_;
}

bool Fusion::step_active() const {
  std::lock_guard<std::mutex> lock(m_);
  return ready_count_ > 0;
}

FusionStats Fusion::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  return stats_;
}

std::string Fusion::teardown(int64_t wait_ms) {
  std::unique_lock<std::mutex> lock(m_);
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable() && step_started_ && !step_done_ &&
      !done_cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0)), [&] { return step_done_; })) {
    lock.unlock();  // a step left in the middle: its collectives fail rather than wait out the timeout
    control_.abort();
    data_.abort();
    lock.lock();
  }
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  lock.lock();
  std::string failure = error_;
  flights_.clear();  // the thread completed or freed each before it ended
  for (Open& o : opens_) o.slots.clear();
  return failure;
}

// ---- the thread ----

void Fusion::loop() {
  try {
    if (dev_.device.type != PL_DEVICE_CPU && dev_.api->set_device != nullptr)
      check(dev_.host, dev_.api->set_device(dev_.acc, dev_.device.index), cfg_.who + ": the fusion thread's device");
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(m_);
    error_ = e.what();
    return;
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stop_ || (step_started_ && !step_done_); });
      if (stop_ && !(step_started_ && !step_done_)) return;
    }
    std::string failure;
    try {
      cycles();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty()) {  // the peers must not wait out their timeout for this rank
      control_.abort();
      data_.abort();
      for (Flight& f : flights_)
        if (f.work != nullptr) data_.api()->work_destroy(f.work);
      flights_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      if (!failure.empty()) error_ = failure;
      step_done_ = true;
    }
    done_cv_.notify_all();
    if (!failure.empty()) return;
  }
}

void Fusion::cycles() {
  std::fill(agreed_.begin(), agreed_.end(), 0);
  for (Open& o : opens_) o.members.clear(), o.bytes = 0;
  const auto period =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(cfg_.cycle_ms));
  const size_t n = entries_.size();
  PL_Tensor verdict{};
  verdict.struct_size = sizeof verdict;
  verdict.data = flags_.data();
  verdict.dtype = PL_I32;
  verdict.device = PL_Device{PL_DEVICE_CPU, 0};
  verdict.numel = verdict.shape[0] = static_cast<int64_t>(n + 1);
  verdict.ndim = 1;
  // The step's first cycle waits a period too (or the end of backward): at the first gradient
  // little is ready, and a cycle there is one more control allreduce per step, beside backward.
  auto next = Clock::now() + period;
  for (uint64_t cycle = 1;; ++cycle) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait_until(lock, next, [&] { return stop_ || backward_over_; });
      if (stop_ && !backward_over_) fail(PL_ERR_RUNTIME, "teardown came in the middle of a step's backward");
      for (size_t k = 0; k < n; ++k) flags_[k] = ready_[k];
      flags_[n] = backward_over_ ? 1 : 0;
    }
    next = Clock::now() + period;
    control_.allreduce(verdict, PL_REDUCE_MIN,
                       cfg_.who + ": the fusion negotiation (cycle " + std::to_string(cycle) + ")");
    {
      std::lock_guard<std::mutex> lock(m_);
      ++stats_.cycles;
    }
    const bool over = flags_[n] != 0;  // every rank's backward is over: everything is ready everywhere
    for (size_t i = 0; i < opens_.size() && !over; ++i)  // 1. buffers that waited a cycle
      if (!opens_[i].members.empty()) flush(opens_[i], static_cast<int>(i));
    for (size_t k = 0; k < n; ++k) {  // 2. the newly ready gradients, in order
      if (flags_[k] == 0 || agreed_[k]) continue;
      agreed_[k] = 1;
      const Entry& e = entries_[k];
      if (cfg_.threshold == 0 || e.bytes >= cfg_.threshold) {
        lone(k);
        continue;
      }
      Open& o = opens_[static_cast<size_t>(open_of_[k])];
      if (o.bytes + e.bytes > cfg_.threshold) flush(o, open_of_[k]);
      o.members.push_back(k);
      o.bytes += e.bytes;
      if (o.bytes == cfg_.threshold) flush(o, open_of_[k]);
    }
    if (over) {  // 3. the rest goes now
      if (std::find(agreed_.begin(), agreed_.end(), 0) != agreed_.end())
        fail(PL_ERR_INTERNAL, "every rank's backward is over but a gradient was not found ready everywhere");
      for (size_t i = 0; i < opens_.size(); ++i)
        if (!opens_[i].members.empty()) flush(opens_[i], static_cast<int>(i));
      break;
    }
    reap(false);
  }
  reap(true);
}

int64_t Fusion::lay_out(const std::vector<size_t>& members, std::vector<PL_Tensor>& parts,
                        std::vector<int64_t>& offsets) const {
  int64_t numel = 0;
  for (size_t k : members) {
    parts.push_back(entries_[k].grad);
    offsets.push_back(numel);
    numel += entries_[k].grad.numel;
  }
  return numel;
}

std::string Fusion::describe(const std::vector<size_t>& members) const {
  std::string s = std::to_string(members.size()) + " gradient(s): ";
  for (size_t j = 0; j < members.size() && j < 3; ++j)
    s += (j ? ", '" : "'") + names_[entries_[members[j]].param] + "'";
  if (members.size() > 3) s += ", ...";
  return s;
}

PL_Work* Fusion::issue(PL_Tensor& t, const std::string& what) {
  if (cfg_.predivide != 1.0)
    check(dev_.host, dev_.api->scale(dev_.acc, &t, 1.0 / cfg_.predivide, nullptr), what + ": the pre-division");
  const PL_ReduceOp op = cfg_.average && cfg_.predivide == 1.0 ? PL_REDUCE_AVG : PL_REDUCE_SUM;
  PL_Work* w = nullptr;
  check(dev_.host, data_.api()->allreduce(data_.get(), &t, op, &w), what);
  if (w == nullptr) fail(PL_ERR_INTERNAL, what + ": the process group returned no work handle");
  std::lock_guard<std::mutex> lock(m_);
  ++stats_.allreduces;
  return w;
}

void Fusion::flush(Open& o, int open_index) {
  if (o.members.empty()) return;
  const std::string what = cfg_.who + ": the fused allreduce of " + describe(o.members);
  // A free buffer of this dtype; when both are in flight, the oldest collectives complete first.
  auto free_slot = [&]() -> int {
    for (size_t s = 0; s < o.busy.size(); ++s)
      if (!o.busy[s]) return static_cast<int>(s);
    return -1;
  };
  int slot = free_slot();
  if (slot < 0 && o.slots.size() < kSlots) {
    o.slots.emplace_back(dev_, o.slot_bytes, what + ": allocating a fusion buffer");
    o.busy.push_back(0);
    slot = static_cast<int>(o.slots.size()) - 1;
  }
  while (slot < 0) {
    if (flights_.empty()) fail(PL_ERR_INTERNAL, what + ": every fusion buffer is busy but nothing is in flight");
    complete(flights_.front());
    flights_.pop_front();
    slot = free_slot();
  }
  Flight f;
  f.open = open_index;
  f.slot = slot;
  f.members = std::move(o.members);
  std::vector<PL_Tensor> parts;
  std::vector<int64_t> offsets;
  const int64_t numel = lay_out(f.members, parts, offsets);
  PL_Tensor base = entries_[f.members.front()].grad;
  base.data = o.slots[static_cast<size_t>(slot)].get();
  base.device = dev_.device;
  f.flat = reducer::sub_view(base, 0, numel);
  reducer::pack_parts(dev_, parts, offsets, f.flat, what + ": packing");
  o.busy[static_cast<size_t>(slot)] = 1;
  o.members.clear();
  o.bytes = 0;
  f.work = issue(f.flat, what);
  {
    std::lock_guard<std::mutex> lock(m_);
    stats_.tensors += f.members.size();
    stats_.bytes += bytes_of(f.flat);
  }
  flights_.push_back(std::move(f));
}

void Fusion::lone(size_t k) {
  Entry& e = entries_[k];
  const std::string what = cfg_.who + ": the allreduce of " + describe({k});
  Flight f;
  f.members = {k};
  f.flat = reducer::sub_view(e.grad, 0, e.grad.numel);
  f.work = issue(f.flat, what);
  {
    std::lock_guard<std::mutex> lock(m_);
    stats_.tensors += 1;
    stats_.bytes += e.bytes;
  }
  flights_.push_back(std::move(f));
}

void Fusion::complete(Flight& f) {
  const std::string what = cfg_.who + ": the allreduce of " + describe(f.members);
  PL_Work* w = f.work;
  f.work = nullptr;
  data_.wait(w, data_.timeout_ms(), what);
  if (cfg_.average && cfg_.predivide != 1.0)
    check(dev_.host, dev_.api->scale(dev_.acc, &f.flat, cfg_.predivide / cfg_.world, nullptr),
          what + ": the post-scaling");
  if (f.open < 0) return;  // in place
  Open& o = opens_[static_cast<size_t>(f.open)];
  std::vector<PL_Tensor> parts;
  std::vector<int64_t> offsets;
  lay_out(f.members, parts, offsets);
  reducer::unpack_parts(dev_, f.flat, offsets, parts, what + ": unpacking");
  o.busy[static_cast<size_t>(f.slot)] = 0;
}

void Fusion::reap(bool all) {
  while (!flights_.empty()) {
    Flight& f = flights_.front();
    if (!all) {
      int32_t done = 0;
      check(dev_.host, data_.api()->work_test(f.work, &done), cfg_.who + ": testing a fused allreduce");
      if (!done) return;
    }
    complete(f);
    flights_.pop_front();
  }
}

}  // namespace plrt::horovod
