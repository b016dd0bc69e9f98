#include "strategy_handle.hpp"

#include <cmath>
#include <cstddef>
#include <exception>
#include <mutex>
#include <plrt/sdk/error.hpp>

namespace plrt::sdk {

namespace {

struct StepCall {
  const StrategyHandle::ReplicaStep* step;
  std::mutex mu;
  int error_replica = -1;  // the lowest replica that threw
  std::exception_ptr error;
};

PL_Error* step_trampoline(void* user, int32_t replica, int32_t num_replicas, PL_Device device, PL_Parameter* params,
                          size_t num_params) {
  (void)params, (void)num_params;  // the trainer knows each replica's module (it registered them)
  auto* call = static_cast<StepCall*>(user);
  try {
    (*call->step)(replica, num_replicas, device);
    return nullptr;
  } catch (...) {
    std::lock_guard<std::mutex> lock(call->mu);
    if (call->error_replica < 0 || replica < call->error_replica) {
      call->error_replica = replica;
      call->error = std::current_exception();
    }
    return pl_error_new(PL_ERR_RUNTIME, "training_step failed (the trainer rethrows the original error)");
  }
}

struct OptimizerCall {
  const StrategyHandle::OptimizerStep* step;
  int calls = 0;
  std::exception_ptr error;
};

PL_Error* optimizer_trampoline(void* user, const PL_ParamRange* ranges, size_t num_ranges) {
  auto* call = static_cast<OptimizerCall*>(user);
  if (++call->calls > 1)
    return pl_error_new(PL_ERR_INVALID_ARGUMENT,
                        "optimizer_step: fn->step was called more than once in one step; "
                        "a strategy calls it exactly once, with every range this rank updates");
  try {
    (*call->step)(ranges, num_ranges);
    return nullptr;
  } catch (...) {
    call->error = std::current_exception();
    return pl_error_new(PL_ERR_RUNTIME, "the optimizer step failed (the trainer rethrows the original error)");
  }
}

}  // namespace

#define PL_STRAT_ENTRY(field) \
  (api_->struct_size >= offsetof(PL_StrategyApi, field) + sizeof(api_->field) ? api_->field : nullptr)

StrategyHandle::~StrategyHandle() {
  try {
    teardown();
  } catch (const std::exception& e) {
    if (host_)
      host_->log(host_->ctx, PL_LOG_WARN, "trainer", (std::string("strategy teardown failed: ") + e.what()).c_str());
  }
  if (s_) api_->destroy(s_);
}

void StrategyHandle::create(const Runtime& rt, const std::string& name, const Accelerator& acc,
                            const StrategySetup& s) {
  PluginRef ref = rt.find(PL_PLUGIN_STRATEGY, name);
  host_ = rt.host();
  api_ = ref.api<PL_StrategyApi>();
  name_ = ref.requested_name;
  std::vector<PL_Option> items;
  for (const auto& kv : ref.presets) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
  for (const auto& kv : s.options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
  PL_StrategyConfig c{};
  c.struct_size = sizeof c;
  c.global_rank = s.rank;
  c.world_size = s.world_size;
  c.local_rank = s.local_rank;
  c.local_world_size = s.local_world_size;
  c.node_rank = s.node_rank;
  c.num_nodes = s.num_nodes;
  c.accelerator_api = acc.api();
  c.accelerator = acc.get();
  c.device_ids = s.device_ids.data();
  c.num_devices = s.device_ids.size();
  c.process_group_backend = s.process_group_backend.c_str();
  c.store = s.store;
  c.timeout_ms = s.timeout_ms;
  c.options = {sizeof(PL_OptionList), items.data(), items.size()};
  check(host_, api_->create(host_, &c, &s_));
  if (auto f = PL_STRAT_ENTRY(process_group)) check(host_, f(s_, &pg_api_, &pg_));
  if (s.world_size > 1 && pg_ == nullptr) warn_without_group(ref.path, c.options);
}

// A strategy that communicates but answers no process_group() looks to the trainer like one that
// runs alone: its metric collectives and the checkpoint's RNG gather quietly stay on this rank
// (metrics.cpp's Collectives), so say so once, naming the plugin's file and the fix.  Only for a
// strategy whose launch_info asks for a process group (one training each rank alone on purpose,
// needs_process_group 0, is left alone), and only for what its own entries do not cover.
void StrategyHandle::warn_without_group(const std::string& path, const PL_OptionList& options) const {
  PL_LaunchInfo info{};
  info.struct_size = sizeof info;
  if (PL_Error* e = api_->launch_info(&options, &info)) {  // accepted when the job was resolved
    host_->error_destroy(e);
    return;
  }
  if (!info.needs_process_group) return;
  std::string lost;
  if (!has_reduce() || !has_all_gather())
    lost =
        "log(sync_dist=True) and the epoch metrics stay this rank's own values, and checkpoints keep rank 0's "
        "RNG state only";
  if (!has_agree_skip())
    lost += std::string(lost.empty() ? "" : "; ") + "under 16-mixed each rank decides alone whether to skip a step";
  if (lost.empty()) return;
  host_->log(host_->ctx, PL_LOG_WARN, "trainer",
             ("strategy '" + name_ + "' (" + path +
              ") asks for a process group (launch_info: needs_process_group) but its process_group() " +
              (PL_STRAT_ENTRY(process_group) ? "answered no group" : "entry is NULL") +
              ", so the trainer's own collectives do not reach the other ranks: " + lost +
              ". Fix: answer the group the strategy made in its process_group() entry (or implement reduce, "
              "all_gather and agree_skip)")
                 .c_str());
}

void StrategyHandle::setup(std::vector<PL_Parameter>& params) {
  const auto timed = span("setup");
  check(host_, api_->setup(s_, params.data(), params.size()));
  torn_down_ = false;
}

void StrategyHandle::run_step(const ReplicaStep& step) {
  StepCall call;
  call.step = &step;
  PL_ReplicaStepFn fn{sizeof(PL_ReplicaStepFn), &call, step_trampoline};
  PL_Error* e = api_->run_step(s_, &fn);
  if (call.error) {
    if (e) host_->error_destroy(e);
    std::rethrow_exception(call.error);
  }
  check(host_, e);
}

int StrategyHandle::num_replicas() const {
  auto f = PL_STRAT_ENTRY(num_replicas);
  if (!f) return 1;
  int32_t n = 1;
  check(host_, f(s_, &n));
  if (n < 1) throw Error(PL_ERR_RUNTIME, "strategy '" + name_ + "' reports " + std::to_string(n) + " replicas");
  return n;
}

void StrategyHandle::setup_replica(int replica, std::vector<PL_Parameter>& params) {
  auto f = PL_STRAT_ENTRY(setup_replica);
  if (!f)
    throw Error(PL_ERR_UNSUPPORTED, "strategy '" + name_ + "' drives several replicas but has no setup_replica entry");
  check(host_, f(s_, replica, params.data(), params.size()));
}

void StrategyHandle::on_grad_ready(size_t index) {
  if (auto f = PL_STRAT_ENTRY(on_grad_ready)) check(host_, f(s_, index));
}
void StrategyHandle::after_backward() {
  const auto timed = span("after_backward");
  check(host_, api_->after_backward(s_));
}
void StrategyHandle::set_grad_sync(bool on) {
  if (auto f = PL_STRAT_ENTRY(set_grad_sync)) check(host_, f(s_, on ? 1 : 0));
}
void StrategyHandle::before_optimizer_step() {
  const auto timed = span("before_optimizer_step");
  if (auto f = PL_STRAT_ENTRY(before_optimizer_step)) check(host_, f(s_));
}
void StrategyHandle::after_optimizer_step() {
  const auto timed = span("after_optimizer_step");
  if (auto f = PL_STRAT_ENTRY(after_optimizer_step)) check(host_, f(s_));
}

bool StrategyHandle::has_step_hooks() const {
  return PL_STRAT_ENTRY(before_optimizer_step) != nullptr || PL_STRAT_ENTRY(after_optimizer_step) != nullptr;
}
bool StrategyHandle::has_optimizer_step() const { return PL_STRAT_ENTRY(optimizer_step) != nullptr; }
bool StrategyHandle::has_agree_skip() const { return PL_STRAT_ENTRY(agree_skip) != nullptr; }
bool StrategyHandle::has_reduce() const { return s_ && PL_STRAT_ENTRY(reduce) != nullptr; }
bool StrategyHandle::has_all_gather() const { return s_ && PL_STRAT_ENTRY(all_gather) != nullptr; }

void StrategyHandle::optimizer_step(const OptimizerStep& step) {
  const auto timed = span("optimizer_step");
  OptimizerCall call;
  call.step = &step;
  PL_OptimizerFn fn{sizeof(PL_OptimizerFn), &call, optimizer_trampoline};
  PL_Error* e = PL_STRAT_ENTRY(optimizer_step)(s_, &fn);
  if (call.error) {
    if (e) host_->error_destroy(e);
    std::rethrow_exception(call.error);
  }
  check(host_, e);
  if (call.calls != 1)
    throw Error(PL_ERR_RUNTIME, "strategy '" + name_ +
                                    "': optimizer_step returned without calling fn->step; it must "
                                    "call it exactly once (with no ranges when this rank updates none)");
}

bool StrategyHandle::agree_skip(bool found_inf) {
  int32_t skip = 0;
  const auto timed = span("agree_skip");
  check(host_, PL_STRAT_ENTRY(agree_skip)(s_, found_inf ? 1 : 0, &skip));
  return skip != 0;
}

void StrategyHandle::reduce(PL_Tensor& tensor, PL_ReduceOp op) {
  const auto timed = span("reduce");
  check(host_, PL_STRAT_ENTRY(reduce)(s_, &tensor, op));
}

void StrategyHandle::all_gather(const PL_Tensor& input, std::vector<PL_Tensor>& outputs) {
  const auto timed = span("all_gather");
  check(host_, PL_STRAT_ENTRY(all_gather)(s_, &input, outputs.data(), outputs.size()));
}

PL_StrategyStateInfo StrategyHandle::state_info() const {
  PL_StrategyStateInfo info{};
  info.struct_size = sizeof info;
  if (auto f = PL_STRAT_ENTRY(state_info)) check(host_, f(s_, &info));
  if (!PL_STRAT_ENTRY(save_state) || !PL_STRAT_ENTRY(load_state)) {
    if (info.has_state)
      throw Error(PL_ERR_RUNTIME, "strategy '" + name_ +
                                      "' says it has state (state_info) but lacks the save_state "
                                      "or load_state entry");
  }
  return info;
}

void StrategyHandle::save_state(const std::string& dir) {
  const auto timed = span("save_state");
  check(host_, PL_STRAT_ENTRY(save_state)(s_, dir.c_str()));
}

void StrategyHandle::load_state(const std::string& dir, int saved_world_size) {
  const auto timed = span("load_state");
  check(host_, PL_STRAT_ENTRY(load_state)(s_, dir.c_str(), saved_world_size));
}

bool StrategyHandle::has_owned_ranges() const { return s_ && PL_STRAT_ENTRY(owned_ranges) != nullptr; }

std::vector<PL_ParamRange> StrategyHandle::owned_ranges(const std::vector<PL_Parameter>& params) const {
  auto f = PL_STRAT_ENTRY(owned_ranges);
  if (!s_ || !f) return {};
  if (!PL_STRAT_ENTRY(optimizer_step) || !PL_STRAT_ENTRY(reduce))
    throw Error(PL_ERR_RUNTIME, "strategy '" + name_ +
                                    "' has owned_ranges but lacks optimizer_step or reduce, which a sharded "
                                    "strategy needs (pl_strategy.h, ABI 1.5)");
  size_t count = 0;
  check(host_, f(s_, nullptr, 0, &count));
  PL_ParamRange blank{};
  blank.struct_size = sizeof blank;
  std::vector<PL_ParamRange> out(count, blank);
  size_t again = 0;
  check(host_, f(s_, out.data(), out.size(), &again));
  if (again != count)
    throw Error(PL_ERR_RUNTIME, "strategy '" + name_ + "': owned_ranges answered " + std::to_string(count) +
                                    " ranges, then " + std::to_string(again) + "; they must stay the same");
  for (size_t k = 0; k < out.size(); ++k) {
    const PL_ParamRange& r = out[k];
    const std::string what = "strategy '" + name_ + "': owned_ranges range " + std::to_string(k);
    if (!PL_HAS_FIELD(PL_ParamRange, &r, end))
      throw Error(PL_ERR_VERSION, what + " has struct_size " + std::to_string(r.struct_size) +
                                      ", smaller than ABI 1.4's " + std::to_string(PL_STRUCT_SIZE(PL_ParamRange, end)));
    if (r.param_index >= params.size())
      throw Error(PL_ERR_RUNTIME, what + " names entry " + std::to_string(r.param_index) + " but setup registered " +
                                      std::to_string(params.size()));
    if (pl_parameter_kind(&params[r.param_index]) != PL_PARAM_TRAINABLE)
      throw Error(PL_ERR_RUNTIME,
                  what + " names entry " + std::to_string(r.param_index) + ", which is not a trainable parameter");
    if (r.begin < 0 || r.begin > r.end || r.end > params[r.param_index].value.numel)
      throw Error(PL_ERR_RUNTIME, what + " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                      ") is not inside entry " + std::to_string(r.param_index) + " (numel " +
                                      std::to_string(params[r.param_index].value.numel) + ")");
  }
  return out;
}

StrategyHandle::OptimizerRequests StrategyHandle::bind_optimizer(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& hyper, int64_t steps) {
  auto f = PL_STRAT_ENTRY(bind_optimizer);
  if (!f) return {};
  std::vector<PL_Option> items;
  for (const auto& kv : hyper) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
  PL_OptimizerInfo info{};
  info.struct_size = sizeof info;
  info.name = name.c_str();
  info.hyperparameters = {sizeof(PL_OptionList), items.data(), items.size()};
  info.steps = steps;
  check(host_, f(s_, &info));
  OptimizerRequests r;
  r.first_moment_in_grads = info.first_moment_in_grads != 0;
  if (!std::isfinite(info.lr_scale) || info.lr_scale < 0)
    throw Error(PL_ERR_RUNTIME, "strategy '" + name_ + "' asked bind_optimizer's lr_scale " +
                                    std::to_string(info.lr_scale) + ", which is not a finite factor >= 0");
  r.lr_scale = info.lr_scale == 0 ? 1.0 : info.lr_scale;
  if (info.lr_scale_reason != nullptr) r.lr_scale_reason = info.lr_scale_reason;
  r.broadcast_optimizer_state = info.broadcast_optimizer_state != 0;
  return r;
}

void StrategyHandle::sync_weights() {
  if (!s_ || torn_down_) return;
  const auto timed = span("sync_weights");
  if (auto f = PL_STRAT_ENTRY(sync_weights)) check(host_, f(s_));
}

void StrategyHandle::teardown() {
  if (!s_ || torn_down_) return;
  torn_down_ = true;
  check(host_, api_->teardown(s_));
}

double StrategyHandle::stat(const std::string& name) const {
  if (!s_) throw Error(PL_ERR_INVALID_ARGUMENT, "no strategy yet: statistics exist once fit has started");
  auto f = PL_STRAT_ENTRY(get_stat);
  if (!f) throw Error(PL_ERR_UNSUPPORTED, "strategy '" + name_ + "' reports no statistics");
  double v = 0;
  check(host_, f(s_, name.c_str(), &v));
  return v;
}

}  // namespace plrt::sdk
