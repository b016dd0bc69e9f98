// The checks of a PL_StrategyConfig that read the same in every C++ strategy family: the config's
// first fields, the accelerator table's size, and the walk over the option list.  Each throws
// plugin::Failure; `who` (the plugin's name) begins every message.
#pragma once

#include <plrt/pl_plugin.h>

#include <functional>
#include <string>

namespace plrt::strategy {

// In this order: `c` is not NULL, its struct_size is at least v1's, world_size >= 1, and
// global_rank is in [0, world_size).
void check_config_basics(const std::string& who, const PL_StrategyConfig* c);

// An accelerator table smaller than the v1 minimum is refused (a NULL table is not checked here).
void check_accelerator_table(const std::string& who, const PL_AcceleratorApi* a);

// Walks `list` in order: its struct_size and items (when it has any), then each entry's
// struct_size and its key and value (both set) before visit(key, value) sees it.  A later entry
// overrides an earlier one; that is the visitor's to apply.
void for_each_option(const std::string& who, const PL_OptionList& list,
                     const std::function<void(const std::string& key, const std::string& value)>& visit);

}  // namespace plrt::strategy
