// The sample's data: a safetensors file (x: F32 [N, D], y: I64 [N]) or a built-in synthetic set,
// split deterministically into training and held-out parts, or a second file for validation.
// The training rows keep the file's order (the DataLoader shuffles, or with --no-shuffle not), so
// a run sees the same order as another framework given the same file.
#pragma once

#include <cstdint>
#include <memory>
#include <plrt/sdk/data.hpp>
#include <string>

struct ClassifierData {
  std::shared_ptr<pl::TensorDataset> train, heldout;
  int64_t features = 0, classes = 0;
};

struct SyntheticSpec {
  int64_t samples = 16384;  // training + held-out
  int64_t features = 784;
  int64_t classes = 10;
  uint64_t seed = 1234;  // the data's own seed: the same data whatever --seed says
};

// Labels read without --classes above this many classes are refused (a stray value would build a
// layer of that width and run out of memory without saying why); --classes raises it.
constexpr int64_t kMaxInferredClasses = 65536;

struct FileDataSpec {
  std::string path;             // training data (and the held-out part, unless val_path is given)
  std::string val_path;         // optional: a separate validation file, the same D
  double heldout_fraction = 0;  // of `path`'s rows; 0: train on the file as it is
  uint64_t split_seed = 0;      // which rows are held out (each part stays in file order)
  int64_t classes = 0;          // > 0: every label must be < classes and the layer has this many;
                                // 0: max label + 1, at most kMaxInferredClasses
};

// Gaussian clusters, two per class, with noise that makes the classes overlap a little: learnable,
// not trivially (held-out accuracy tells).
ClassifierData make_synthetic(const SyntheticSpec& spec, double heldout_fraction);
// Reads x and y from the file(s); errors name the file, the tensor (or row) and what is expected.
ClassifierData load_safetensors(const FileDataSpec& spec);
