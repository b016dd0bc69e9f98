// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the bytes.  Files written here load with safetensors.torch.load_file.
// Written by hand (a few hundred lines): Debian packages no C++ reader.
#pragma once

#include <plrt/sdk/tensor.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pl::safetensors {

// "F32", "F64", "F16", "BF16", "I32", "I64", "U8"; throws for an invalid dtype.
std::string dtype_name(PL_DType dtype);
PL_DType dtype_from_name(const std::string& name);  // throws naming the valid names

struct File {
  std::map<std::string, Tensor> tensors;  // host tensors
  std::map<std::string, std::string> metadata;
};

// Serialises to bytes (device tensors are copied to host first).  Names must be unique.
std::string serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Parses bytes; every inconsistency (header length, JSON, dtype, shape vs byte count, offsets out
// of bounds, overlapping or with gaps) throws pl::Error naming `source` and the problem.
File parse(const std::string& bytes, const std::string& source = "<memory>");

// Writes atomically (see atomic_file.hpp) and loads.
void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata = {});
File load(const std::string& path);

}  // namespace pl::safetensors
