// What plrt_ddp_core offers: the ddp family's entries, for its plugin files (ddp.cpp, ddp_spawn.cpp,
// through PLRT_DEFINE_STRATEGY_PLUGIN) and for ddp2's inner instance (plrt_dp_core).  The two
// plugins differ only in how their workers are started; each worker's strategy is the same.
#pragma once

#include "strategy_plugin.hpp"

namespace plrt::ddp {

// `who` (static) is the plugin's name: it begins messages and names the log source.
PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept;

// The family, as strategy_plugin.hpp describes it.
struct Family {
  using Variant = PL_LaunchMode;  // how the workers start

  // Checks the options as create does (an unknown one, a bad value: PL_ERR_INVALID_ARGUMENT naming
  // it and what is valid), then fills `out` with `mode`, needs_process_group 1 and
  // max_devices_per_process 1.
  static PL_Error* launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept;
  static PL_Error* create(const char* who, PL_LaunchMode /*mode*/, const PL_Host* host, const PL_StrategyConfig* config,
                          PL_Strategy** out) noexcept {
    return ddp::create(who, host, config, out);
  }
  static PL_StrategyApi table();
};

}  // namespace plrt::ddp
