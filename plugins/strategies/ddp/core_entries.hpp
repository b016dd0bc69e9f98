// The C entries that a strategy built on ddp's core (ddp_sharded, bagua) takes from ddp unchanged:
// run_step with its buffer broadcast, the bucket hooks (on_grad_ready, after_backward,
// set_grad_sync), the metrics group and collectives (process_group, reduce, all_gather) and the
// skip agreement.  Each checks its instance, runs under plugin::guard and calls ddp's C++ operation
// on the instance's core.  S has `const PL_Host* host`, `std::string who` and
// `std::unique_ptr<ddp::DdpStrategy> core`; Family (a static string) names the library in the one
// message without an instance.  The strategy's own entries (create, setup, optimizer_step,
// get_stat, ...) are its own file's.  CoreFamily below is such a strategy's family: its create and
// launch_info.
#pragma once

#include "entry_support.hpp"
#include "strategy.hpp"

namespace plrt::ddp {

template <class S, const char* Family>
struct CoreEntries {
  template <class Body>
  static PL_Error* entry(PL_Strategy* s, const char* fn, Body&& body) noexcept {
    return strategy::entry(strategy::as<S>(s), Family, fn, [&](S& d) { body(d); });
  }

  static PL_Error* run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
    return entry(s, "run_step", [&](S& d) { ddp::run_step(*d.core, fn); });
  }
  static PL_Error* after_backward(PL_Strategy* s) {
    return entry(s, "after_backward", [&](S& d) { ddp::after_backward(*d.core); });
  }
  static PL_Error* on_grad_ready(PL_Strategy* s, size_t index) {
    return entry(s, "on_grad_ready", [&](S& d) { ddp::on_grad_ready(*d.core, index); });
  }
  static PL_Error* set_grad_sync(PL_Strategy* s, int32_t enabled) {
    return entry(s, "set_grad_sync", [&](S& d) { ddp::set_grad_sync(*d.core, enabled != 0); });
  }
  static PL_Error* process_group(PL_Strategy* s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group) {
    return entry(s, "process_group", [&](S& d) { ddp::process_group(*d.core, out_api, out_group); });
  }
  static PL_Error* agree_skip(PL_Strategy* s, int32_t found_inf, int32_t* out_skip) {
    return entry(s, "agree_skip", [&](S& d) {
      if (out_skip == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": agree_skip: out_skip is NULL");
      *out_skip = ddp::agree_skip(*d.core, found_inf != 0) ? 1 : 0;
    });
  }
  static PL_Error* reduce(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op) {
    return entry(s, "reduce", [&](S& d) {
      if (tensor == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": reduce: tensor is NULL");
      ddp::reduce(*d.core, *tensor, op);
    });
  }
  static PL_Error* all_gather(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs) {
    return entry(s, "all_gather", [&](S& d) {
      if (input == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, d.who + ": all_gather: input is NULL");
      ddp::all_gather(*d.core, *input, outputs, num_outputs);
    });
  }

  // ddp's optimizer_step (every trainable parameter whole), for a strategy whose gradients are
  // every rank's reduction as ddp's are; not set by fill().
  static PL_Error* optimizer_step(PL_Strategy* s, const PL_OptimizerFn* fn) {
    return entry(s, "optimizer_step", [&](S& d) { ddp::optimizer_step(*d.core, fn); });
  }

  // Sets the entries above, but optimizer_step, in `api`.
  static void fill(PL_StrategyApi& api) {
    api.run_step = run_step;
    api.after_backward = after_backward;
    api.on_grad_ready = on_grad_ready;
    api.set_grad_sync = set_grad_sync;
    api.process_group = process_group;
    api.agree_skip = agree_skip;
    api.reduce = reduce;
    api.all_gather = all_gather;
  }
};

// The family (strategy_plugin.hpp) of a strategy built on ddp's core: one process per device,
// started by the launcher or spawned (the variant), the options checked in launch_info by create's
// parser so that plrun refuses a bad one before any work.  Ops has
//   static constexpr const char* kFamily;   the library's name, for the one message without instance
//   static PL_Strategy* make(const char* who, const PL_Host*, const PL_StrategyConfig*);   (throws)
//   static void check_options(PL_LaunchMode, const PL_OptionList&);   as make parses them (throws)
//   static PL_StrategyApi table();
template <class Ops>
struct CoreFamily {
  using Variant = PL_LaunchMode;
  static PL_Error* launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept {
    return strategy::launch_guard(Ops::kFamily, [&] {
      if (options != nullptr) Ops::check_options(mode, *options);
      strategy::fill_launch_info(mode, true, 1, out);
    });
  }
  static PL_Error* create(const char* who, PL_LaunchMode /*mode*/, const PL_Host* host, const PL_StrategyConfig* config,
                          PL_Strategy** out) noexcept {
    return strategy::create(Ops::kFamily, who, host, out, [&] { return Ops::make(who, host, config); });
  }
  static PL_StrategyApi table() { return Ops::table(); }
};

}  // namespace plrt::ddp
