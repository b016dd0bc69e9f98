// What plrt_horovod_core offers its plugin file (horovod.cpp): the family (ddp::CoreFamily).
#pragma once

#include "core_entries.hpp"
#include "strategy_plugin.hpp"

namespace plrt::horovod {

// entries.cpp
struct Ops {
  static constexpr const char* kFamily = "horovod";
  static PL_Strategy* make(const char* who, const PL_Host* host, const PL_StrategyConfig* config);
  static void check_options(PL_LaunchMode mode, const PL_OptionList& options);
  static PL_StrategyApi table();
};
using Family = ddp::CoreFamily<Ops>;

}  // namespace plrt::horovod
