// The horovod instance (create) and its C boundary: every exported entry checks its instance and
// runs under plugin::guard (plrt_strategy_common's entry_support.hpp).  ddp's entries come through
// ddp::CoreEntries (the step with its buffer broadcast, the metrics collectives, the skip
// agreement, the optimizer step); the gradient hooks go to the fusion engine.
#include <algorithm>
#include <cstdlib>

#include "config_checks.hpp"
#include "entry_support.hpp"
#include "horovod_api.hpp"
#include "horovod_strategy.hpp"

namespace plrt::horovod {

namespace {

constexpr char kFamilyName[] = "horovod";
using Core = ddp::CoreEntries<HorovodStrategy, kFamilyName>;
constexpr int64_t kTeardownWaitMs = 10000;  // as ddp's: a peer in the same step finishes it in far less

const char* lookup_env(const char* name) { return std::getenv(name); }

std::unique_ptr<HorovodStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* c) {
  strategy::check_config_basics(who, c);
  auto s = std::make_unique<HorovodStrategy>();
  s->host = host;
  s->who = who;
  s->opts = parse_options(who, c->options, lookup_env);
  ddp::CoreSpec spec;
  spec.opts = s->opts.ddp;
  spec.own_gradient_sync = true;
  s->core = ddp::create_strategy(who, host, c, spec);
  const ddp::DdpStrategy& core = *s->core;
  if (core.group) {
    const PL_AcceleratorApi* a = core.dev.api;
    if (s->opts.predivide != 1.0 && (a->struct_size < PL_STRUCT_SIZE(PL_AcceleratorApi, scale) || !a->scale))
      plugin::fail(PL_ERR_UNSUPPORTED, s->who +
                                           ": option gradient_predivide_factor needs the accelerator's scale "
                                           "entry, which this accelerator lacks; leave the factor at 1");
    // Horovod's controller: the negotiation runs in host memory over gloo, whatever carries the data.
    strategy::GroupSpec g = core.group_spec;
    g.name += ".horovod_control";
    g.backend = "gloo";
    g.device = PL_Device{PL_DEVICE_CPU, 0};
    g.accelerator_api = nullptr;
    g.accelerator = nullptr;
    if (core.group.backend() != "gloo") g.options.clear();  // the user's pg.* options are the data backend's
    g.needs = {"allreduce"};
    s->control = strategy::Group(host, g);
  }
  FusionConfig fc;
  fc.who = who;
  fc.threshold = s->opts.fusion_threshold_bytes();
  fc.cycle_ms = s->opts.cycle_time_ms;
  fc.average = s->opts.average;
  fc.predivide = s->opts.predivide;
  fc.world = core.world;
  s->fusion = std::make_unique<Fusion>(fc, s->core->dev, s->core->group, s->control);
  plugin::logf(host, PL_LOG_DEBUG, who,
               "tensor fusion: threshold %zu bytes (%s), cycle %g ms (%s), op %s, gradient_predivide_factor %g, "
               "scale_lr %s",
               fc.threshold, s->opts.threshold_from.c_str(), fc.cycle_ms, s->opts.cycle_from.c_str(),
               fc.average ? "average" : "sum", fc.predivide, s->opts.scale_lr ? "true" : "false");
  return s;
}

void need_setup(HorovodStrategy& d, const char* fn) {
  std::lock_guard<std::mutex> lock(d.core->m);
  if (!d.core->set_up) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": " + fn + " was called before setup");
}

void stop(HorovodStrategy& d) {
  const std::string failure = d.fusion->teardown(std::min(d.core->timeout_ms, kTeardownWaitMs));
  if (!failure.empty())
    plugin::logf(d.host, PL_LOG_WARN, d.who.c_str(), "teardown: the gradient fusion had failed: %s", failure.c_str());
  ddp::teardown(*d.core);
}

void destroy(PL_Strategy* s) noexcept {
  strategy::destroy(strategy::as<HorovodStrategy>(s), [](HorovodStrategy& d) { stop(d); });
}

PL_Error* setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  return Core::entry(s, "setup", [&](HorovodStrategy& d) {
    ddp::setup(*d.core, params, num_params);  // rank 0's parameters and buffers, broadcast
    try {
      d.fusion->setup(params, num_params, d.core->names);
    } catch (...) {
      ddp::teardown(*d.core);
      throw;
    }
  });
}

PL_Error* teardown(PL_Strategy* s) {
  return Core::entry(s, "teardown", [&](HorovodStrategy& d) { stop(d); });
}

PL_Error* run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return Core::entry(s, "run_step", [&](HorovodStrategy& d) {
    if (d.fusion->step_active())
      plugin::fail(PL_ERR_INVALID_ARGUMENT,
                   d.who +
                       ": run_step: the previous step is not finished (gradients were reported since the last "
                       "after_backward); call after_backward first");
    ddp::run_step(*d.core, fn);
  });
}

PL_Error* on_grad_ready(PL_Strategy* s, size_t index) {
  return Core::entry(s, "on_grad_ready", [&](HorovodStrategy& d) {
    need_setup(d, "on_grad_ready");
    d.fusion->on_grad_ready(index);
  });
}

PL_Error* after_backward(PL_Strategy* s) {
  return Core::entry(s, "after_backward", [&](HorovodStrategy& d) {
    need_setup(d, "after_backward");
    d.fusion->finish_step();
  });
}

PL_Error* set_grad_sync(PL_Strategy* s, int32_t enabled) {
  return Core::entry(s, "set_grad_sync", [&](HorovodStrategy& d) { d.fusion->set_grad_sync(enabled != 0); });
}

// Lightning's HorovodStrategy multiplied every param group's learning rate by the world size and
// broadcast rank 0's optimizer state; both are the host's to do, asked here (ABI 1.7).
PL_Error* bind_optimizer(PL_Strategy* s, PL_OptimizerInfo* info) {
  return Core::entry(s, "bind_optimizer", [&](HorovodStrategy& d) {
    if (info == nullptr || info->struct_size < PL_STRUCT_SIZE(PL_OptimizerInfo, first_moment_in_grads))
      plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": bind_optimizer needs a PL_OptimizerInfo of ABI 1.6 or later");
    const bool v17 = PL_HAS_FIELD(PL_OptimizerInfo, info, broadcast_optimizer_state);
    const int32_t world = d.core->world;
    if (d.opts.scale_lr && world > 1) {
      if (!v17)
        plugin::fail(PL_ERR_UNSUPPORTED, d.who +
                                             ": option scale_lr=true asks the host to multiply the learning rate "
                                             "by the world size, which needs a host of ABI 1.7 or later; this "
                                             "host's PL_OptimizerInfo is older: multiply it yourself and set "
                                             "scale_lr=false");
      info->lr_scale = world;
      d.lr_reason = "the world size " + std::to_string(world) +
                    ", as Lightning's HorovodStrategy did; strategy option scale_lr=false keeps the configured rate";
      info->lr_scale_reason = d.lr_reason.c_str();
    }
    if (v17 && world > 1) info->broadcast_optimizer_state = 1;
  });
}

// synced_steps: after_backward calls with grad sync on (one per accumulation window); cycles: the
// negotiation rounds; allreduces / fused_tensors / allreduce_bytes: the gradient collectives, the
// gradients they carried and their bytes; exposed_allreduce_ms: after_backward's wait.
PL_Error* get_stat(PL_Strategy* s, const char* name, double* out) {
  return Core::entry(s, "get_stat", [&](HorovodStrategy& d) {
    const FusionStats st = d.fusion->stats();
    const ddp::DdpStrategy& c = *d.core;
    const double steps = static_cast<double>(st.synced_steps);
    strategy::answer_stat(
        d.who, name, out,
        {{"synced_steps", steps},
         {"cycles", static_cast<double>(st.cycles)},
         {"allreduces", static_cast<double>(st.allreduces)},
         {"fused_tensors", static_cast<double>(st.tensors)},
         {"allreduce_bytes", static_cast<double>(st.bytes)},
         {"bytes_per_step", steps > 0 ? static_cast<double>(st.bytes) / steps : 0.0},
         {"exposed_allreduce_ms", st.exposed_ms},
         {"fusion_threshold_bytes", static_cast<double>(d.opts.fusion_threshold_bytes())},
         {"cycle_time_ms", d.opts.cycle_time_ms},
         {"buffer_broadcast_bytes", static_cast<double>(c.opts.broadcast_buffers ? c.buffer_bytes : 0)},
         {"frozen_bytes", static_cast<double>(c.frozen_bytes)}});
  });
}

}  // namespace

HorovodStrategy::~HorovodStrategy() {
  fusion.reset();  // borrows the core's device and group, and the control group
  control.reset();
}

PL_Strategy* Ops::make(const char* who, const PL_Host* host, const PL_StrategyConfig* config) {
  return strategy::handle(create_strategy(who, host, config).release());
}

void Ops::check_options(PL_LaunchMode /*mode*/, const PL_OptionList& options) {
  parse_options(kFamily, options, lookup_env);
}

PL_StrategyApi Ops::table() {
  PL_StrategyApi api{};
  api.struct_size = sizeof api;
  Core::fill(api);  // ddp's metrics collectives and skip agreement (its bucket hooks replaced below)
  api.destroy = destroy;
  api.setup = setup;
  api.teardown = teardown;
  api.run_step = run_step;
  api.on_grad_ready = on_grad_ready;
  api.after_backward = after_backward;
  api.set_grad_sync = set_grad_sync;
  api.optimizer_step = Core::optimizer_step;
  api.bind_optimizer = bind_optimizer;
  api.get_stat = get_stat;
  return api;
}

}  // namespace plrt::horovod
