#include "sharded_options.hpp"

#include "plugin_support.hpp"

namespace plrt::ddp_sharded {

ShardedOptions parse_options(const std::string& who, const PL_OptionList& list) {
  ShardedOptions o;
  auto extra = [&](const std::string& key, const std::string& value) {
    if (key != "stage") return false;
    if (value == "1" || value == "2") {
      o.stage = value[0] - '0';
      return true;
    }
    plugin::fail(PL_ERR_INVALID_ARGUMENT, who + ": option stage='" + value +
                                              "' is not valid: use 1 (optimizer state sharded) or 2 (optimizer "
                                              "state and gradients sharded); default 2");
  };
  o.ddp = ddp::parse_options(who, list, extra, "stage (1 or 2)");
  return o;
}

}  // namespace plrt::ddp_sharded
