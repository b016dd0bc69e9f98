// Hyperparameters: LightningModule::save_hyperparameters and the hparams.yaml text.  Written here
// rather than with yaml-cpp: the file is flat scalars (one nested block), and linking yaml-cpp
// into the static SDK would make it a dependency of every program and package built on it; the
// quoting of strings is nlohmann::json's (already the SDK's), which YAML reads as double-quoted.
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/lightning_module.hpp>
#include <sstream>

#include "hparams_yaml.hpp"
#include "sdk_internal.hpp"

namespace pl {

void LightningBase::save_hyperparameters(const HParams& hparams) {
  for (const auto& [name, value] : hparams)
    if (name.empty() || name == "trainer")
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "save_hyperparameters: the name '" + name + "' is not valid: " +
                      (name.empty() ? "names must not be empty" : "hparams.yaml keeps the trainer's knobs under it"));
  for (const auto& [name, value] : hparams) hparams_.insert_or_assign(name, value);
}

}  // namespace pl

namespace plrt::sdk {

namespace {

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A key stays plain when YAML cannot read it as anything but that string.
std::string key_text(const std::string& k) {
  static const char* const kSpecial[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  bool plain = !k.empty() && (std::isalpha(static_cast<unsigned char>(k[0])) || k[0] == '_');
  for (char c : k) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  std::string lower;
  for (char c : k) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (const char* s : kSpecial) plain = plain && lower != s;
  return plain ? k : quoted(k);
}

std::string double_text(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s = plrt::sdk::shortest(v);
  if (s.find('.') == std::string::npos) {
    const size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");  // 1e-05 → 1.0e-05: a float to YAML 1.1 too
  }
  return s;
}

std::string value_text(const pl::HParam& p) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(v);
        else if constexpr (std::is_same_v<T, double>)
          return double_text(v);
        else
          return quoted(v);
      },
      p.value());
}

}  // namespace

std::string hparams_yaml(const pl::HParams& module, const pl::HParams& trainer) {
  std::ostringstream os;
  for (const auto& [k, v] : module) os << key_text(k) << ": " << value_text(v) << "\n";
  if (!trainer.empty()) {
    os << "trainer:\n";
    for (const auto& [k, v] : trainer) os << "  " << key_text(k) << ": " << value_text(v) << "\n";
  }
  return os.str();
}

}  // namespace plrt::sdk
