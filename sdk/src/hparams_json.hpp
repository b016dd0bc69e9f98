// Callback state (HParams) as JSON and back, for checkpoints' trainer.json and rank 0's decisions
// (ModelCheckpoint): non-finite numbers survive as {"float": "inf"}; `what` names the source in
// errors.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <plrt/sdk/hparams.hpp>
#include <string>

namespace pl {
nlohmann::json hparams_to_json(const HParams& h);
HParams hparams_from_json(const nlohmann::json& j, const std::string& what);
// A map of numbers (callback_metrics) the same way: a NaN or infinite value (a diverged run) is kept.
nlohmann::json numbers_to_json(const std::map<std::string, double>& values);
std::map<std::string, double> numbers_from_json(const nlohmann::json& j, const std::string& what);
}  // namespace pl
