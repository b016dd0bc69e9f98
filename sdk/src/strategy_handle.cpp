#include "strategy_handle.hpp"

#include <plrt/sdk/error.hpp>

#include <cstddef>
#include <exception>

namespace pl::detail {

namespace {

struct StepCall {
  const std::function<void()>* step;
  std::exception_ptr error;
};

PL_Error* step_trampoline(void* user, int32_t replica, int32_t num_replicas, PL_Device device, PL_Parameter* params,
                          size_t num_params) {
  (void)replica, (void)device, (void)params, (void)num_params;
  auto* call = static_cast<StepCall*>(user);
  if (num_replicas != 1)
    return pl_error_new(PL_ERR_UNSUPPORTED,
                        "this trainer drives one replica per process; strategies with several replicas (dp, ddp2) "
                        "come with the GPU issue");
  try {
    (*call->step)();
    return nullptr;
  } catch (...) {
    call->error = std::current_exception();
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

void StrategyHandle::run_step(const std::function<void()>& step) {
  StepCall call{&step, nullptr};
  PL_ReplicaStepFn fn{sizeof(PL_ReplicaStepFn), &call, step_trampoline};
  PL_Error* e = api_->run_step(s_, &fn);
  if (call.error) {
    if (e) host_->error_destroy(e);
    std::rethrow_exception(call.error);
  }
  check(host_, e);
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
