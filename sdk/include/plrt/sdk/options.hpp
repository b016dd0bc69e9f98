// Strategy options as text: KEY=VALUE on a command line (plrun --strategy-option, plrt-mlp's), and
// PL_TRAINER_STRATEGY_OPTIONS, the JSON object plrun hands its workers and pl::Trainer reads.  A
// later entry of a key overrides an earlier one, as in a PL_OptionList.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pl {

using OptionList = std::vector<std::pair<std::string, std::string>>;

// The variable plrun sets from its --strategy-option flags (see encode_options).
inline constexpr const char* kStrategyOptionsVariable = "PL_TRAINER_STRATEGY_OPTIONS";

// "KEY=VALUE" split at the first '=' (the value may hold more, or be empty).  No '=' or an empty
// key: pl::Error (PL_ERR_INVALID_ARGUMENT) naming `flag`, the text and the expected form.
std::pair<std::string, std::string> parse_option_assignment(const std::string& flag, const std::string& text);

// Sets `key` to `value` in `list`: any earlier entry of `key` is removed and the new one appended.
void set_option(OptionList& list, const std::string& key, const std::string& value);

// `list` as a JSON object of strings, e.g. {"bucket_cap_mb":"10","pg.probe_ms":"500"}, each key
// once with its last value, in set_option's order.
std::string encode_options(const OptionList& list);

// The reverse of encode_options.  Anything but a JSON object of strings with non-empty keys is
// pl::Error (PL_ERR_INVALID_ARGUMENT) naming `variable`, what is wrong and the expected form.
OptionList decode_options(const std::string& variable, const std::string& text);

}  // namespace pl
