// What plrt_ddp_sharded_core offers its two plugin files (ddp_sharded.cpp, ddp_sharded_spawn.cpp):
// they differ only in how the workers start.
#pragma once

#include "strategy_plugin.hpp"

namespace plrt::ddp_sharded {

PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept;

struct Family {
  using Variant = PL_LaunchMode;
  static PL_Error* launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept;
  static PL_Error* create(const char* who, PL_LaunchMode /*mode*/, const PL_Host* host, const PL_StrategyConfig* config,
                          PL_Strategy** out) noexcept {
    return ddp_sharded::create(who, host, config, out);
  }
  static PL_StrategyApi table();
};

}  // namespace plrt::ddp_sharded
