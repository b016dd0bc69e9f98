// Strategy options as text (KEY=VALUE, and the JSON object of PL_TRAINER_STRATEGY_OPTIONS).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/options.hpp>

namespace pl {

namespace {

constexpr size_t kQuoteAtMost = 200;  // characters of a bad variable quoted in its error

std::string quoted(const std::string& text) {
  return text.size() <= kQuoteAtMost ? text : text.substr(0, kQuoteAtMost) + "...";
}

}  // namespace

std::pair<std::string, std::string> parse_option_assignment(const std::string& flag, const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, flag + " '" + text +
                                             "' is not valid: " + (eq == 0 ? "the key is empty" : "it has no '='") +
                                             "; write KEY=VALUE, e.g. " + flag + " bucket_cap_mb=10");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

void set_option(OptionList& list, const std::string& key, const std::string& value) {
  list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& kv) { return kv.first == key; }), list.end());
  list.emplace_back(key, value);
}

std::string encode_options(const OptionList& list) {
  OptionList last;  // each key once, with its last value
  for (const auto& [key, value] : list) set_option(last, key, value);
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [key, value] : last) j[key] = value;
  return j.dump();
}

OptionList decode_options(const std::string& variable, const std::string& text) {
  auto invalid = [&](const std::string& why) {
    return Error(PL_ERR_INVALID_ARGUMENT, variable + "='" + quoted(text) + "' is not valid: " + why +
                                              "; it must be a JSON object of strings, e.g. "
                                              "{\"bucket_cap_mb\": \"10\"} (plrun --strategy-option sets it)");
  };
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw invalid(std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw invalid(std::string("it is a JSON ") + j.type_name() + ", not an object");
  OptionList out;
  for (const auto& [key, value] : j.items()) {
    if (key.empty()) throw invalid("a key is empty");
    if (!value.is_string()) throw invalid("the value of '" + key + "' is a " + value.type_name() + ", not a string");
    set_option(out, key, value.get<std::string>());
  }
  return out;
}

}  // namespace pl
