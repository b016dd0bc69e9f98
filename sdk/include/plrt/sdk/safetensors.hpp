// The safetensors format (huggingface/safetensors), written by hand (a few hundred lines): Debian
// packages no C++ reader or writer.  A file is
//   * 8 bytes: N, the header length, an unsigned 64-bit little-endian integer;
//   * N bytes: a UTF-8 JSON object {"name": {"dtype": "F32", "shape": [2, 3],
//     "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}} (metadata optional);
//     the reference writer pads it with spaces to a multiple of 8 bytes, and so does serialize();
//   * the byte buffer: each tensor's elements, row-major, little-endian, at [begin, end) relative
//     to the buffer's start; together the tensors cover the buffer with no gap and no overlap.
// Files written here load with safetensors.torch.load_file, and the reverse.
#pragma once

#include <map>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl::safetensors {

// "F32", "F64", "F16", "BF16", "I32", "I64", "U8"; throws for an invalid dtype.
std::string dtype_name(PL_DType dtype);
PL_DType dtype_from_name(const std::string& name);  // throws naming the valid names

// The largest header accepted (the reference implementation's limit): guards against a corrupt
// length allocating gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct File {
  std::map<std::string, Tensor> tensors;  // host tensors
  std::map<std::string, std::string> metadata;
};

// Serialises to bytes, tensors laid out in the given order (device tensors are copied to host
// first).  Names must be unique and not "__metadata__"; tensors defined, of a dtype listed above.
std::string serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Parses bytes; every inconsistency (header length, JSON, duplicate names, missing or mistyped
// fields, dtype, shape vs byte count, offsets out of bounds, overlapping or with gaps, metadata
// values that are not strings) throws pl::Error naming `source` and the problem.
File parse(const std::string& bytes, const std::string& source = "<memory>");

// Writes atomically (write_file_atomic, see atomic_file.hpp) and loads (errors name the path).
void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata = {});
File load(const std::string& path);

}  // namespace pl::safetensors
