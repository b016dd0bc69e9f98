// setup: checks the parameters, makes every replica start from rank 0's values (a coalesced
// broadcast, as PyTorch's _sync_module_states), lays out the gradient buckets (the reducer) and the
// per-step buffer broadcasts; teardown undoes it.
//
// Kinds (ABI 1.4): TRAINABLE entries get gradient buckets; FROZEN ones are broadcast at setup only
// (their values never change unless the host changes them, so DDP's per-forward broadcast of
// requires_grad=False parameters would only cost bandwidth); BUFFER entries are broadcast before
// every step when broadcast_buffers is on.  A 1.3 host sends no kind: requires_grad 0 = buffer.
#include <algorithm>
#include <cstdio>

#include "entry_support.hpp"
#include "strategy.hpp"

namespace plrt::ddp {

using plugin::fail;
using reducer::flat_view;
using reducer::PlanInput;
using reducer::PlannedBucket;
using strategy::check;
using strategy::DeviceMemory;

namespace {

// How long teardown waits for a collective left outstanding (a step abandoned without
// after_backward) before it aborts the group: a peer that is in the same collective finishes it
// in far less; one that is not will not come.
constexpr int64_t kTeardownWaitMs = 10000;

std::string device_name(PL_Device d) {
  const char* type = d.type == PL_DEVICE_CPU ? "cpu" : d.type == PL_DEVICE_CUDA ? "cuda" : "device type ";
  std::string out = type;
  if (d.type != PL_DEVICE_CPU && d.type != PL_DEVICE_CUDA) out += std::to_string(d.type);
  return out + ":" + std::to_string(d.index);
}

bool same_device(PL_Device a, PL_Device b) { return a.type == b.type && a.index == b.index; }

// A parameter's memory must be reachable by the accelerator's copies: on this process's device, or
// host memory.
void check_device(const DdpStrategy& s, size_t i, const PL_Tensor& t, const char* which) {
  if (same_device(t.device, s.dev.device) || t.device.type == PL_DEVICE_CPU) return;
  fail(PL_ERR_INVALID_ARGUMENT, s.who + ": setup: " + s.param_name(i) + " has its " + which + " on " +
                                    device_name(t.device) + ", but this process drives " + device_name(s.dev.device) +
                                    " (or host memory)");
}

void check_params(DdpStrategy& s, PL_Parameter* params, size_t n) {
  if (n > 0 && params == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": setup: params is NULL for " + std::to_string(n) + " parameters");
  s.names.clear();
  for (size_t i = 0; i < n; ++i) {
    const PL_Parameter& p = params[i];
    if (p.struct_size < PL_STRUCT_SIZE(PL_Parameter, requires_grad))
      fail(PL_ERR_VERSION, s.who + ": setup: params[" + std::to_string(i) + "].struct_size " +
                               std::to_string(p.struct_size) + " is smaller than the v1 size " +
                               std::to_string(PL_STRUCT_SIZE(PL_Parameter, requires_grad)));
    s.names.push_back(p.name && *p.name ? p.name : "params[" + std::to_string(i) + "]");
    const std::string what = s.who + ": setup: " + s.param_name(i);
    const PL_ParamKind kind = pl_parameter_kind(&p);
    if (kind != PL_PARAM_TRAINABLE && kind != PL_PARAM_FROZEN && kind != PL_PARAM_BUFFER)
      fail(PL_ERR_INVALID_ARGUMENT, what + ": kind " + std::to_string(kind) +
                                        " is not valid (PL_PARAM_TRAINABLE 1, PL_PARAM_FROZEN 2, PL_PARAM_BUFFER 3)");
    if ((kind == PL_PARAM_TRAINABLE) != (p.requires_grad != 0))
      fail(PL_ERR_INVALID_ARGUMENT, what + ": kind " + std::to_string(kind) + " disagrees with requires_grad " +
                                        std::to_string(p.requires_grad) +
                                        " (a TRAINABLE entry requires grad; FROZEN and BUFFER entries do not)");
    plugin::check_tensor(&p.value, (what + " value").c_str());
    check_device(s, i, p.value, "value");
    if (kind != PL_PARAM_TRAINABLE) continue;
    plugin::check_tensor(&p.grad, (what + " grad").c_str());
    check_device(s, i, p.grad, "grad");
    if (p.grad.dtype != p.value.dtype || p.grad.numel != p.value.numel)
      fail(PL_ERR_INVALID_ARGUMENT, what + ": its grad is " + plugin::describe(p.grad) + " but its value is " +
                                        plugin::describe(p.value) + " (they must match)");
  }
}

size_t tensor_bytes(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

// Coalescing groups of the parameters' values (those for which `pick` is true), in registration
// order, about one bucket each.
std::vector<PlannedBucket> value_groups(const DdpStrategy& s, bool (*pick)(const PL_Parameter&)) {
  std::vector<PlanInput> in;
  for (size_t i = 0; i < s.num_params; ++i) {
    const PL_Parameter& p = s.params[i];
    if (pick(p) && p.value.numel > 0) in.push_back({i, tensor_bytes(p.value), p.value.dtype, p.value.device});
  }
  const size_t cap = s.opts.bucket_cap_bytes();
  return reducer::plan_buckets(in, cap, cap);
}

// Broadcasts one coalesced group from rank 0: the root packs, every other rank unpacks.
void broadcast_group(DdpStrategy& s, const PlannedBucket& g, PL_Tensor& flat, const std::string& what) {
  uint8_t* base = static_cast<uint8_t*>(flat.data);
  if (s.rank == 0)
    for (size_t k = 0; k < g.members.size(); ++k) {
      const PL_Tensor& v = s.params[g.members[k]].value;
      s.dev.copy(base + g.offsets[k], s.dev.device, v.data, v.device, tensor_bytes(v),
                 s.who + ": packing " + s.param_name(g.members[k]) + " for " + what);
    }
  s.group.broadcast(flat, 0, s.who + ": " + what);
  if (s.rank != 0)
    for (size_t k = 0; k < g.members.size(); ++k) {
      PL_Tensor& v = s.params[g.members[k]].value;
      s.dev.copy(v.data, v.device, base + g.offsets[k], s.dev.device, tensor_bytes(v),
                 s.who + ": unpacking " + s.param_name(g.members[k]) + " after " + what);
    }
}

bool any_param(const PL_Parameter&) { return true; }
bool is_buffer(const PL_Parameter& p) { return pl_parameter_kind(&p) == PL_PARAM_BUFFER; }

// Every parameter and buffer from rank 0, one coalesced group at a time (so that the extra memory
// stays about one bucket).
void sync_initial_state(DdpStrategy& s) {
  const auto groups = value_groups(s, any_param);
  for (size_t g = 0; g < groups.size(); ++g) {
    DeviceMemory mem(s.dev, groups[g].bytes, s.who + ": allocating the start-up broadcast buffer");
    PL_Tensor flat = flat_view(mem.get(), groups[g], s.dev.device);
    broadcast_group(s, groups[g], flat,
                    "the start-up broadcast of rank 0's parameters (group " + std::to_string(g + 1) + " of " +
                        std::to_string(groups.size()) + ")");
  }
}

void build_buffer_groups(DdpStrategy& s) {
  s.buffer_groups.clear();
  s.buffer_bytes = s.frozen_bytes = 0;
  for (size_t i = 0; i < s.num_params; ++i) {
    const PL_ParamKind kind = pl_parameter_kind(&s.params[i]);
    if (kind == PL_PARAM_BUFFER) s.buffer_bytes += tensor_bytes(s.params[i].value);
    if (kind == PL_PARAM_FROZEN) s.frozen_bytes += tensor_bytes(s.params[i].value);
  }
  if (!s.group || !s.opts.broadcast_buffers) return;
  auto plan = value_groups(s, is_buffer);
  s.buffer_groups.reserve(plan.size());
  for (auto& g : plan) {
    FlatGroup f;
    f.plan = std::move(g);
    f.buffer = DeviceMemory(s.dev, f.plan.bytes, s.who + ": allocating a buffer-broadcast buffer");
    f.tensor = flat_view(f.buffer.get(), f.plan, s.dev.device);
    s.buffer_groups.push_back(std::move(f));
  }
}

void log_layout(const DdpStrategy& s) {
  if (!s.host->log_enabled(s.host->ctx, PL_LOG_DEBUG)) return;
  plugin::logf(s.host, PL_LOG_DEBUG, s.who.c_str(),
               "%zu parameters: %zu gradient buckets, %zu bytes in all (first bucket cap %zu bytes, then %zu); "
               "%zu buffer-broadcast groups (%zu bytes); %zu bytes of frozen parameters, broadcast at setup only",
               s.num_params, s.grads->num_buckets(), s.grads->bucket_bytes(), s.opts.first_bucket_cap_bytes(),
               s.opts.bucket_cap_bytes(), s.buffer_groups.size(), s.buffer_bytes, s.frozen_bytes);
}

}  // namespace

void setup(DdpStrategy& s, PL_Parameter* params, size_t num_params) {
  std::lock_guard<std::mutex> lock(s.m);
  if (s.set_up)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": setup was called twice; call teardown before setting up again");
  check_params(s, params, num_params);
  s.params = params;
  s.num_params = num_params;
  try {
    if (s.group) sync_initial_state(s);
    if (s.buckets)
      s.grads->setup(params, num_params, s.names, s.opts.first_bucket_cap_bytes(), s.opts.bucket_cap_bytes());
    build_buffer_groups(s);
  } catch (...) {
    s.grads->teardown(0);
    s.buffer_groups.clear();
    s.params = nullptr;
    s.num_params = 0;
    throw;
  }
  s.steps.clear();
  for (size_t i = 0; i < num_params; ++i)
    if (pl_parameter_kind(&params[i]) == PL_PARAM_TRAINABLE)
      s.steps.push_back({sizeof(PL_ParamRange), i, 0, params[i].value.numel});
  s.set_up = true;
  log_layout(s);
}

void broadcast_buffers(DdpStrategy& s) {
  std::lock_guard<std::mutex> lock(s.m);
  for (size_t g = 0; g < s.buffer_groups.size(); ++g) {
    FlatGroup& f = s.buffer_groups[g];
    broadcast_group(s, f.plan, f.tensor,
                    "the broadcast of rank 0's buffers (group " + std::to_string(g + 1) + " of " +
                        std::to_string(s.buffer_groups.size()) + ")");
  }
}

void run_step(DdpStrategy& s, const PL_ReplicaStepFn* fn, bool with_buffers) {
  strategy::check_step_fn(s.who, fn);
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (!s.set_up) fail(PL_ERR_INVALID_ARGUMENT, s.who + ": run_step was called before setup");
  }
  if (step_active(s))
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": run_step: the previous step is not finished (on_grad_ready came for " +
                                      std::to_string(s.grads->ready_count()) +
                                      " parameters since the last after_backward); call after_backward first");
  if (with_buffers) broadcast_buffers(s);  // as DDP's forward does: replicas compute with rank 0's buffers
  check(s.host, fn->run(fn->user, 0, 1, s.dev.device, s.params, s.num_params), s.who + ": run_step");
}

void process_group(const DdpStrategy& s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group) {
  strategy::check_process_group_outs(s.who, out_api, out_group);
  *out_api = s.group ? s.group.api() : nullptr;
  *out_group = s.group.get();
}

void teardown(DdpStrategy& s) {
  std::lock_guard<std::mutex> lock(s.m);
  const std::string failure = s.grads->teardown(std::min(s.timeout_ms, kTeardownWaitMs));
  if (!failure.empty())
    plugin::logf(s.host, PL_LOG_WARN, s.who.c_str(), "teardown: a gradient collective left outstanding failed: %s",
                 failure.c_str());
  s.buffer_groups.clear();
  s.steps.clear();
  s.params = nullptr;
  s.num_params = 0;
  s.set_up = false;
}

void on_grad_ready(DdpStrategy& s, size_t index) { s.grads->on_grad_ready(index); }
void after_backward(DdpStrategy& s) { s.grads->finish_step(); }
void set_grad_sync(DdpStrategy& s, bool enabled) { s.grads->set_grad_sync(enabled); }
bool step_active(const DdpStrategy& s) { return s.grads->step_active(); }

}  // namespace plrt::ddp
