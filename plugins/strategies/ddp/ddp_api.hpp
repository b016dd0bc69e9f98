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

}  // namespace plrt::ddp
