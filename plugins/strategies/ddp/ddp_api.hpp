// What a ddp-family plugin file (ddp.cpp, ddp_spawn.cpp) needs from plrt_ddp_core: the shared
// PL_StrategyApi entries, parameterised by the plugin's name and launch mode.  The two plugins
// differ only in how their workers are started; each worker's strategy is the same.
#pragma once

#include <plrt/pl_plugin.h>

namespace plrt::ddp {

// Fills `out` with `mode`, needs_process_group 1 and max_devices_per_process 1.
PL_Error* launch_info(PL_LaunchMode mode, const PL_OptionList* options, PL_LaunchInfo* out) noexcept;
// `who` (static) is the plugin's name: it begins messages and names the log source.
PL_Error* create(const char* who, const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) noexcept;

using LaunchInfoFn = PL_Error* (*)(const PL_OptionList*, PL_LaunchInfo*);
using CreateFn = PL_Error* (*)(const PL_Host*, const PL_StrategyConfig*, PL_Strategy**);
// The full table: the plugin's own launch_info and create, every other entry shared.
PL_StrategyApi make_api(LaunchInfoFn launch_info, CreateFn create);

// The table of the plugin named `Name` whose workers start as `Mode`.  The C entries take no
// context, so both are template arguments; `Name` is a static array (constexpr char kName[]).
template <PL_LaunchMode Mode, const char* Name>
PL_StrategyApi make_api() {
  return make_api([](const PL_OptionList* options, PL_LaunchInfo* out) { return launch_info(Mode, options, out); },
                  [](const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
                    return create(Name, host, config, out);
                  });
}

// The descriptor of a ddp-family strategy plugin (version 0.1.0, no aliases) over `api`.
constexpr PL_Plugin make_plugin(const char* name, const char* description, const PL_StrategyApi* api) {
  return {sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, name, "0.1.0", description, nullptr, 0, api};
}

}  // namespace plrt::ddp
