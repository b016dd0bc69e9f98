// Callback state and callback_metrics as JSON and back (hparams_json.hpp).
#include "hparams_json.hpp"

#include <cmath>
#include <plrt/sdk/error.hpp>
#include <type_traits>

namespace pl {

namespace {

// A non-finite number (JSON has none) as {"float": "inf" | "-inf" | "nan"}, so that it comes back.
nlohmann::json value_json(const HParam& v) {
  nlohmann::json out;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) {
          if (!std::isfinite(x)) {
            out = {{"float", std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"}};
            return;
          }
        }
        out = x;
      },
      v.value());
  return out;
}

}  // namespace

nlohmann::json hparams_to_json(const HParams& h) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : h) j[k] = value_json(v);
  return j;
}

HParams hparams_from_json(const nlohmann::json& j, const std::string& what) {
  HParams h;
  for (const auto& [k, v] : j.items()) {
    if (v.is_boolean()) {
      h.emplace(k, v.get<bool>());
    } else if (v.is_number_integer()) {
      h.emplace(k, v.get<int64_t>());
    } else if (v.is_number()) {
      h.emplace(k, v.get<double>());
    } else if (v.is_string()) {
      h.emplace(k, v.get<std::string>());
    } else if (v.is_null()) {  // a non-finite number written before they were kept
      h.emplace(k, std::nan(""));
    } else if (v.is_object() && v.size() == 1 && v.contains("float") && v["float"].is_string()) {
      const std::string f = v["float"].get<std::string>();
      const double inf = std::numeric_limits<double>::infinity();
      if (f != "inf" && f != "-inf" && f != "nan")
        throw Error(PL_ERR_INVALID_ARGUMENT,
                    what + ": value '" + k + "' is {\"float\": \"" + f + "\"}; valid: inf, -inf, nan");
      h.emplace(k, f == "nan" ? std::nan("") : f == "inf" ? inf : -inf);
    } else {
      throw Error(PL_ERR_INVALID_ARGUMENT, what + ": value '" + k + "' is not a bool, number or string");
    }
  }
  return h;
}

nlohmann::json numbers_to_json(const std::map<std::string, double>& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values) j[k] = value_json(v);
  return j;
}

std::map<std::string, double> numbers_from_json(const nlohmann::json& j, const std::string& what) {
  std::map<std::string, double> out;
  const HParams h = hparams_from_json(j, what);
  for (const auto& [k, v] : h) {
    const double nan = std::nan("");
    const double x = number_of(h, k, nan);
    if (std::isnan(x) && !std::holds_alternative<double>(v.value()))
      throw Error(PL_ERR_INVALID_ARGUMENT, what + ": value '" + k + "' is not a number");
    out[k] = x;
  }
  return out;
}

}  // namespace pl
