// The weight-exchanging algorithms' shared pieces (weight_buckets.hpp): value buckets, the bounded
// point-to-point transfers, and the per-rank values of a checkpoint.
#include "weight_buckets.hpp"

#include "reducer.hpp"

namespace plrt::bagua {

using plugin::fail;
using strategy::check;

namespace {

size_t value_bytes(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

std::string value_key(const ddp::DdpStrategy& c, size_t i) { return "x/" + std::to_string(i) + "/" + c.names[i]; }

}  // namespace

PL_Tensor ValueBucket::view(const ddp::DdpStrategy& c, void* data) const {
  PL_Tensor t = reducer::flat_view(data, plan, c.dev.device);
  t.numel = t.shape[0] = numel;
  return t;
}

std::vector<ValueBucket> plan_value_buckets(const ddp::DdpStrategy& c, double bucket_size_mb) {
  std::vector<reducer::PlanInput> in;
  for (size_t k = c.num_params; k-- > 0;) {  // reverse registration order, as the gradient buckets
    const PL_Parameter& p = c.params[k];
    if (pl_parameter_kind(&p) == PL_PARAM_TRAINABLE && p.value.numel > 0)
      in.push_back({k, value_bytes(p.value), p.value.dtype, p.value.device});
  }
  const size_t cap = ddp::DdpOptions::mib_to_bytes(bucket_size_mb);
  auto plan = reducer::plan_buckets(in, cap, cap);
  std::vector<ValueBucket> out(plan.size());
  for (size_t b = 0; b < plan.size(); ++b) {
    ValueBucket& v = out[b];
    v.index = b;
    v.plan = std::move(plan[b]);
    v.numel = static_cast<int64_t>(v.plan.bytes / pl_dtype_size(v.plan.dtype));
    for (size_t j = 0; j < v.plan.members.size(); ++j) {
      v.offsets.push_back(static_cast<int64_t>(v.plan.offsets[j] / pl_dtype_size(v.plan.dtype)));
      v.parts.push_back(c.params[v.plan.members[j]].value);
    }
    const size_t m = v.plan.members.size();
    v.name = "weight bucket " + std::to_string(b) + " of " + std::to_string(plan.size()) + " (" + std::to_string(m) +
             (m == 1 ? " parameter, " : " parameters, ") + std::to_string(v.plan.bytes) + " bytes of " +
             pl_dtype_name(v.plan.dtype) + ", first " + c.param_name(v.plan.members.front()) + ")";
  }
  return out;
}

void pack_values(const ddp::DdpStrategy& c, ValueBucket& b, PL_Tensor& flat) {
  reducer::pack_parts(c.dev, b.parts, b.offsets, flat, c.who + ": packing the values of " + b.name);
}

void unpack_values(const ddp::DdpStrategy& c, ValueBucket& b, const PL_Tensor& flat) {
  reducer::unpack_parts(c.dev, flat, b.offsets, b.parts, c.who + ": unpacking the values of " + b.name);
}

void require_setup(const ddp::DdpStrategy& c, const char* fn) {
  if (!c.set_up) fail(PL_ERR_INVALID_ARGUMENT, c.who + ": " + fn + " was called before setup (or after teardown)");
}

// ---- Transfers ----

Transfers::~Transfers() {
  if (works_.empty()) return;
  g_.abort();  // fail whatever is still posted at once: work_destroy would wait for it
  for (auto& w : works_) g_.api()->work_destroy(w.first);
}

void Transfers::send(const PL_Tensor& t, int32_t peer, int32_t tag) {
  PL_Work* w = nullptr;
  const std::string what = what_ + ": the send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  check(c_.host, g_.api()->send(g_.get(), &t, peer, tag, &w), what);
  if (w == nullptr) fail(PL_ERR_INTERNAL, what + ": the process group returned no work handle");
  works_.emplace_back(w, what);
}

void Transfers::recv(PL_Tensor& t, int32_t peer, int32_t tag) {
  PL_Work* w = nullptr;
  const std::string what =
      what_ + ": the recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  check(c_.host, g_.api()->recv(g_.get(), &t, peer, tag, &w), what);
  if (w == nullptr) fail(PL_ERR_INTERNAL, what + ": the process group returned no work handle");
  works_.emplace_back(w, what);
}

void Transfers::wait_all() {
  while (!works_.empty()) {
    auto [w, what] = works_.front();
    works_.erase(works_.begin());
    g_.wait(w, g_.timeout_ms(), what);  // frees w; on a timeout aborts the group first
  }
}

// ---- PendingValues ----

void PendingValues::save(const ddp::DdpStrategy& c, RankState& out) const {
  for (size_t i = 0; i < c.num_params; ++i) {
    const PL_Parameter& p = c.params[i];
    if (pl_parameter_kind(&p) != PL_PARAM_TRAINABLE) continue;
    const auto pending = values_.find(i);
    if (pending != values_.end()) {  // loaded, not yet put back: the parameter holds rank 0's value
      out.add(value_key(c, i), p.value.dtype, pending->second);
      continue;
    }
    std::vector<uint8_t> bytes(value_bytes(p.value));
    c.dev.copy(bytes.data(), PL_Device{PL_DEVICE_CPU, 0}, p.value.data, p.value.device, bytes.size(),
               c.who + ": save_state: reading " + c.param_name(i));
    out.add(value_key(c, i), p.value.dtype, std::move(bytes));
  }
}

void PendingValues::load(const ddp::DdpStrategy& c, const RankState& in, const std::string& file) {
  std::map<size_t, std::vector<uint8_t>> values;
  for (size_t i = 0; i < c.num_params; ++i) {
    const PL_Parameter& p = c.params[i];
    if (pl_parameter_kind(&p) != PL_PARAM_TRAINABLE) continue;
    values[i] = in.get(c.who, file, value_key(c, i), p.value.dtype, value_bytes(p.value)).bytes;
  }
  values_ = std::move(values);
}

void PendingValues::apply(const ddp::DdpStrategy& c) {
  for (const auto& [i, bytes] : values_) {
    const PL_Tensor& v = c.params[i].value;
    c.dev.copy(v.data, v.device, bytes.data(), PL_Device{PL_DEVICE_CPU, 0}, bytes.size(),
               c.who + ": restoring this rank's own " + c.param_name(i) + " from the checkpoint");
  }
  values_.clear();
}

}  // namespace plrt::bagua
