// What plrt_ddp_sharded_core offers its two plugin files (ddp_sharded.cpp, ddp_sharded_spawn.cpp):
// they differ only in how the workers start (ddp::CoreFamily's variant).
#pragma once

#include "core_entries.hpp"
#include "strategy_plugin.hpp"

namespace plrt::ddp_sharded {

// entries.cpp
struct Ops {
  static constexpr const char* kFamily = "ddp_sharded";
  static PL_Strategy* make(const char* who, const PL_Host* host, const PL_StrategyConfig* config);
  static void check_options(PL_LaunchMode mode, const PL_OptionList& options);
  static PL_StrategyApi table();
};
using Family = ddp::CoreFamily<Ops>;

}  // namespace plrt::ddp_sharded
