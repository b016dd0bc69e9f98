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

}  // namespace pl
