#include "config_checks.hpp"

#include "plugin_support.hpp"

namespace plrt::strategy {

using plugin::fail;

void check_config_basics(const std::string& who, const PL_StrategyConfig* c) {
  if (c == nullptr) fail(PL_ERR_INVALID_ARGUMENT, who + ": create: config is NULL");
  if (c->struct_size < PL_STRUCT_SIZE(PL_StrategyConfig, options))
    fail(PL_ERR_VERSION, who + ": PL_StrategyConfig.struct_size " + std::to_string(c->struct_size) +
                             " is smaller than the v1 size " +
                             std::to_string(PL_STRUCT_SIZE(PL_StrategyConfig, options)));
  if (c->world_size < 1)
    fail(PL_ERR_INVALID_ARGUMENT,
         who + ": world_size " + std::to_string(c->world_size) + " is not valid: it must be >= 1");
  if (c->global_rank < 0 || c->global_rank >= c->world_size)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": global_rank " + std::to_string(c->global_rank) +
                                      " is out of range for world_size " + std::to_string(c->world_size) +
                                      " (valid: 0.." + std::to_string(c->world_size - 1) + ")");
}

void check_accelerator_table(const std::string& who, const PL_AcceleratorApi* a) {
  if (a != nullptr && a->struct_size < PL_ACCELERATOR_API_MIN_SIZE)
    fail(PL_ERR_VERSION, who + ": the accelerator's table (struct_size " + std::to_string(a->struct_size) +
                             ") is smaller than the v1 minimum " + std::to_string(PL_ACCELERATOR_API_MIN_SIZE));
}

void for_each_option(const std::string& who, const PL_OptionList& list,
                     const std::function<void(const std::string& key, const std::string& value)>& visit) {
  if (list.count == 0) return;
  if (list.struct_size < PL_STRUCT_SIZE(PL_OptionList, count))
    fail(PL_ERR_VERSION, who + ": options.struct_size " + std::to_string(list.struct_size) +
                             " is smaller than the v1 size " + std::to_string(PL_STRUCT_SIZE(PL_OptionList, count)));
  if (list.items == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": options.items is NULL for " + std::to_string(list.count) + " options");
  for (size_t i = 0; i < list.count; ++i) {
    const PL_Option& opt = list.items[i];
    if (opt.struct_size < PL_STRUCT_SIZE(PL_Option, value))
      fail(PL_ERR_VERSION, who + ": options.items[" + std::to_string(i) + "].struct_size " +
                               std::to_string(opt.struct_size) + " is smaller than the v1 size " +
                               std::to_string(PL_STRUCT_SIZE(PL_Option, value)));
    if (opt.key == nullptr || opt.value == nullptr)
      fail(PL_ERR_INVALID_ARGUMENT, who + ": options.items[" + std::to_string(i) + "] has a NULL key or value");
    visit(opt.key, opt.value);
  }
}

}  // namespace plrt::strategy
