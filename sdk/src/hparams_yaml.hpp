// hparams.yaml, as Lightning's loggers write it into lightning_logs/version_<n>/: the module's
// hyperparameters (LightningModule::save_hyperparameters) at the top level and the trainer's
// resolved knobs under "trainer".
#pragma once

#include <plrt/sdk/hparams.hpp>
#include <string>

namespace plrt::sdk {

// The YAML text: one "key: value" line per entry, keys sorted, a nested block for `trainer`.
// Strings are double-quoted (JSON's escapes, which YAML's double-quoted scalars share); numbers
// keep a '.' so YAML 1.1 readers (PyYAML) read them as floats; inf and NaN as .inf / .nan.
std::string hparams_yaml(const pl::HParams& module, const pl::HParams& trainer);

}  // namespace plrt::sdk
