// What a plugin file of the dp family (dp.cpp, ddp2/ddp2.cpp) needs from plrt_dp_core: the shared
// PL_StrategyApi, parameterised by the plugin's name and whether it spans processes.  dp drives
// several devices in one process; ddp2 does the same on every node and averages across processes.
#pragma once

#include <plrt/pl_plugin.h>

namespace plrt::dp {

// Fills `out`: PL_LAUNCH_SINGLE_PROCESS, needs_process_group = across_processes, no device limit.
PL_Error* launch_info(bool across_processes, const PL_OptionList* options, PL_LaunchInfo* out) noexcept;
// `who` (static) is the plugin's name: it begins messages and names the log source.
PL_Error* create(const char* who, bool across_processes, const PL_Host* host, const PL_StrategyConfig* config,
                 PL_Strategy** out) noexcept;

using LaunchInfoFn = PL_Error* (*)(const PL_OptionList*, PL_LaunchInfo*);
using CreateFn = PL_Error* (*)(const PL_Host*, const PL_StrategyConfig*, PL_Strategy**);
PL_StrategyApi make_api(LaunchInfoFn launch_info, CreateFn create);

// The table of the plugin named `Name` (a static array: constexpr char kName[]).
template <bool AcrossProcesses, const char* Name>
PL_StrategyApi make_api() {
  return make_api(
      [](const PL_OptionList* options, PL_LaunchInfo* out) { return launch_info(AcrossProcesses, options, out); },
      [](const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
        return create(Name, AcrossProcesses, host, config, out);
      });
}

// The descriptor of a dp-family strategy plugin (version 0.1.0, no aliases) over `api`.
constexpr PL_Plugin make_plugin(const char* name, const char* description, const PL_StrategyApi* api) {
  return {sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, name, "0.1.0", description, nullptr, 0, api};
}

}  // namespace plrt::dp
