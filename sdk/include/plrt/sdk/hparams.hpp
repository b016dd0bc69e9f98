// Hyperparameters: what LightningModule::save_hyperparameters records and the trainer writes to
// lightning_logs/version_<n>/hparams.yaml (as Lightning's loggers do), beside the trainer's
// resolved knobs.  A value is a bool, an integer, a number or a string.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace pl {

class HParam {
 public:
  // One constructor per kind, so that a string literal is a string (not a bool) and an int an
  // integer (not a double).
  HParam(bool v) : v_(v) {}                      // NOLINT
  HParam(int v) : v_(int64_t{v}) {}              // NOLINT
  HParam(long v) : v_(int64_t{v}) {}             // NOLINT
  HParam(long long v) : v_(int64_t{v}) {}        // NOLINT
  HParam(double v) : v_(v) {}                    // NOLINT
  HParam(const char* v) : v_(std::string(v)) {}  // NOLINT
  HParam(std::string v) : v_(std::move(v)) {}    // NOLINT
  const std::variant<bool, int64_t, double, std::string>& value() const { return v_; }
  bool operator==(const HParam& o) const { return v_ == o.v_; }

 private:
  std::variant<bool, int64_t, double, std::string> v_;
};

using HParams = std::map<std::string, HParam>;

// Reading one value back (e.g. a callback's load_state_dict): `key`'s number (an integer or a
// number), or string; `fallback` when it is absent or of another kind.
inline double number_of(const HParams& h, const std::string& key, double fallback) {
  auto it = h.find(key);
  if (it == h.end()) return fallback;
  const auto& v = it->second.value();
  if (std::holds_alternative<double>(v)) return std::get<double>(v);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  return fallback;
}
inline std::string string_of(const HParams& h, const std::string& key, const std::string& fallback = "") {
  auto it = h.find(key);
  return it != h.end() && std::holds_alternative<std::string>(it->second.value())
             ? std::get<std::string>(it->second.value())
             : fallback;
}

}  // namespace pl
