// The per-rank state file of the bagua algorithms that keep state of their own (save_state /
// load_state, pl_strategy.h): "<dir>/strategy.bagua.rank<r>.bin", written by rank r only.  A plugin
// links no SDK (so no safetensors writer), and the state is a few named arrays, so the format is
// small and checked end to end:
//
//   "PLRTBAGU"                    8 bytes, the magic
//   u32 version                   1
//   u32 n, n bytes                the algorithm's name
//   i32 rank, i32 world           who wrote it, at which world size
//   u32 count                     then `count` entries:
//     u32 n, n bytes              the entry's name
//     i32 dtype                   PL_DType
//     u64 n, n bytes              its bytes
//   u64 checksum                  FNV-1a 64 of every byte before it
//
// Integers little-endian (as written by the machines plrt runs on; another byte order fails the
// version check).  Anything that does not parse, a wrong checksum, a wrong algorithm, rank or world
// is PL_ERR_INVALID_ARGUMENT naming the file.
#pragma once

#include <plrt/pl_tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace plrt::bagua {

struct StateEntry {
  std::string name;
  PL_DType dtype = PL_DTYPE_INVALID;
  std::vector<uint8_t> bytes;
};

struct RankState {
  std::string algorithm;
  int32_t rank = 0, world = 1;
  std::vector<StateEntry> entries;

  void add(std::string name, PL_DType dtype, std::vector<uint8_t> bytes) {
    entries.push_back({std::move(name), dtype, std::move(bytes)});
  }
  // The entry `name`, which must be `dtype` and hold `bytes` bytes; else PL_ERR_INVALID_ARGUMENT
  // naming `file` (from another model, or damaged).  `who` begins the message.
  const StateEntry& get(const std::string& who, const std::string& file, const std::string& name, PL_DType dtype,
                        size_t bytes) const;
};

// "<dir>/strategy.bagua.rank<rank>.bin"
std::string state_path(const std::string& dir, int32_t rank);

// Writes `st` to `path` (PL_ERR_RUNTIME naming the file when it cannot).  `who` begins messages.
void write_state(const std::string& who, const std::string& path, const RankState& st);

// Reads `path`; checks the format, the checksum, and that it was written by `algorithm` at `rank` of
// `world` ranks.  A missing, unreadable or damaged file is PL_ERR_INVALID_ARGUMENT naming it.
RankState read_state(const std::string& who, const std::string& path, const std::string& algorithm, int32_t rank,
                     int32_t world);

// load_state's world-size rule (per-rank state loads at the world size it was saved at only):
// PL_ERR_INVALID_ARGUMENT naming both sizes otherwise.
void check_saved_world(const std::string& who, int32_t saved_world, int32_t world);

}  // namespace plrt::bagua
