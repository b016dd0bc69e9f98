// What plrt_dp_core offers: the dp family's entries, for its plugin files (dp.cpp, ddp2/ddp2.cpp,
// through PLRT_DEFINE_STRATEGY_PLUGIN).  dp drives several devices in one process; ddp2 does the
// same on every node and averages across processes.
#pragma once

#include "strategy_plugin.hpp"

namespace plrt::dp {

// The family, as strategy_plugin.hpp describes it.
struct Family {
  using Variant = bool;  // across processes: kAcrossProcesses (ddp2) or kOneProcess (dp)

  // Checks the options as create does (parse_options), then fills `out`: PL_LAUNCH_SINGLE_PROCESS,
  // needs_process_group = across_processes, no device limit.
  static PL_Error* launch_info(bool across_processes, const PL_OptionList* options, PL_LaunchInfo* out) noexcept;
  // `who` (static) is the plugin's name: it begins messages and names the log source.
  static PL_Error* create(const char* who, bool across_processes, const PL_Host* host, const PL_StrategyConfig* config,
                          PL_Strategy** out) noexcept;
  static PL_StrategyApi table();
};

inline constexpr bool kOneProcess = false;
inline constexpr bool kAcrossProcesses = true;

}  // namespace plrt::dp
