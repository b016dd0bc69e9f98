// The sample's data: a safetensors file (x: F32 [N, D], y: I64 [N]) or a built-in synthetic set,
// split deterministically into training and held-out parts.
#pragma once

#include <cstdint>
#include <memory>
#include <plrt/sdk/data.hpp>
#include <string>

struct MlpData {
  std::shared_ptr<pl::TensorDataset> train, heldout;
  int64_t features = 0, classes = 0;
};

struct SyntheticSpec {
  int64_t samples = 16384;  // training + held-out
  int64_t features = 784;
  int64_t classes = 10;
  uint64_t seed = 1234;  // the data's own seed: the same data whatever --seed says
};

// Gaussian clusters, two per class, with noise that makes the classes overlap a little: learnable,
// not trivially (held-out accuracy tells).
MlpData make_synthetic(const SyntheticSpec& spec, double heldout_fraction);
// Reads x and y from a safetensors file; errors name the file, the tensor and what is expected.
MlpData load_safetensors(const std::string& path, double heldout_fraction, uint64_t split_seed);
