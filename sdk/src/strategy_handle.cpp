#include "strategy_handle.hpp"

#include <plrt/sdk/error.hpp>

#include <cstddef>
#include <exception>
#include <mutex>

namespace pl::detail {

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

}  // namespace

#define PL_STRAT_ENTRY(field) \
  (api_->struct_size >= offsetof(PL_StrategyApi, field) + sizeof(api_->field) ? api_->field : nullptr)

StrategyHandle::~StrategyHandle() {
  try {
    teardown();
  } catch (const std::exception& e) {
    if (host_) host_->log(host_->ctx, PL_LOG_WARN, "trainer", (std::string("strategy teardown failed: ") + e.what()).c_str());
  }
  if (s_) api_->destroy(s_);
}

void StrategyHandle::create(const Runtime& rt, const std::string& name, const Accelerator& acc, const StrategySetup& s) {
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
}

void StrategyHandle::setup(std::vector<PL_Parameter>& params) {
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
void StrategyHandle::after_backward() { check(host_, api_->after_backward(s_)); }
void StrategyHandle::set_grad_sync(bool on) {
  if (auto f = PL_STRAT_ENTRY(set_grad_sync)) check(host_, f(s_, on ? 1 : 0));
}
void StrategyHandle::before_optimizer_step() {
  if (auto f = PL_STRAT_ENTRY(before_optimizer_step)) check(host_, f(s_));
}
void StrategyHandle::after_optimizer_step() {
  if (auto f = PL_STRAT_ENTRY(after_optimizer_step)) check(host_, f(s_));
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

}  // namespace pl::detail
