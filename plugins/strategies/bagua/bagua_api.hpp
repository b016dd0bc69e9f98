// What plrt_bagua_core offers its plugin file (bagua.cpp).
#pragma once

#include "strategy_plugin.hpp"

namespace plrt::bagua {

PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept;

struct Family {
  using Variant = PL_LaunchMode;
  static PL_Error* launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept;
  static PL_Error* create(const char* who, PL_LaunchMode /*mode*/, const PL_Host* host, const PL_StrategyConfig* config,
                          PL_Strategy** out) noexcept {
    return bagua::create(who, host, config, out);
  }
  static PL_StrategyApi table();
};

}  // namespace plrt::bagua
