// How each of plrt's C++ strategy plugins is declared.  A family's core library (plrt_ddp_core,
// plrt_dp_core) holds every entry; a plugin file only names the plugin, its variant of the family
// and what it is:
//
//   PLRT_DEFINE_STRATEGY_PLUGIN(plrt::ddp::Family, PL_LAUNCH_SPAWN, "ddp_spawn", "what it is")
//
// A Family is a struct with
//   using Variant = ...;   what tells the family's plugins apart (a launch mode, a bool)
//   static PL_Error* launch_info(Variant, const PL_OptionList*, PL_LaunchInfo*) noexcept;
//   static PL_Error* create(const char* who, Variant, const PL_Host*, const PL_StrategyConfig*,
//                           PL_Strategy**) noexcept;   `who` is static: the plugin's name
//   static PL_StrategyApi table();   every other entry (launch_info and create NULL)
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdint>

#include "entry_support.hpp"

namespace plrt::strategy {

// The table of the plugin named `Name` (a static array).  The C entries take no context, so the
// variant and the name are bound in as template arguments.
template <class Family, typename Family::Variant V, const char* Name>
PL_StrategyApi make_api() {
  PL_StrategyApi api = Family::table();
  api.launch_info = [](const PL_OptionList* options, PL_LaunchInfo* out) {
    return Family::launch_info(V, options, out);
  };
  api.create = [](const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
    return Family::create(Name, V, host, config, out);
  };
  return api;
}

// The descriptor (version 0.1.0) over `api`, with `num_aliases` aliases (a static array, or NULL).
constexpr PL_Plugin make_plugin(const char* name, const char* description, const PL_StrategyApi* api,
                                const PL_Alias* aliases = nullptr, size_t num_aliases = 0) {
  return {sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, name,
          "0.1.0",           description,  aliases,      num_aliases,        api};
}

}  // namespace plrt::strategy

// Defines the plugin's table and descriptor and exports them, as PL_DEFINE_PLUGIN does, through
// strategy::plugin_entry, which also keeps the host's error_new for launch_info (entry_support.hpp).
// Once per plugin.  The _WITH_ALIASES form also names aliases: a static PL_Alias array and its
// length (names that select this plugin with preset options, e.g. bagua_bytegrad).
#define PLRT_DEFINE_STRATEGY_PLUGIN_WITH_ALIASES(FAMILY, VARIANT, NAME, DESCRIPTION, ALIASES, NUM_ALIASES)            \
  namespace {                                                                                                         \
  constexpr char kPluginName[] = NAME;                                                                                \
  const PL_StrategyApi kPluginApi = plrt::strategy::make_api<FAMILY, VARIANT, kPluginName>();                         \
  const PL_Plugin kPlugin = plrt::strategy::make_plugin(kPluginName, DESCRIPTION, &kPluginApi, ALIASES, NUM_ALIASES); \
  }                                                                                                                   \
  extern "C" PL_EXPORT uint32_t pl_plugin_abi_version(void) {                                                         \
    return (static_cast<uint32_t>(PL_ABI_MAJOR) << 16) | static_cast<uint32_t>(PL_ABI_MINOR);                         \
  }                                                                                                                   \
  extern "C" PL_EXPORT PL_Error* pl_plugin_entry_v1(const PL_Host* host, const PL_Plugin** out) {                     \
    return plrt::strategy::plugin_entry(host, &kPlugin, out);                                                         \
  }
#define PLRT_DEFINE_STRATEGY_PLUGIN(FAMILY, VARIANT, NAME, DESCRIPTION) \
  PLRT_DEFINE_STRATEGY_PLUGIN_WITH_ALIASES(FAMILY, VARIANT, NAME, DESCRIPTION, nullptr, 0)
