// The bagua algorithms' per-rank state files (save_state: "strategy.bagua.rank<r>.bin"), read by the
// tests from the format that plugins/strategies/bagua/rank_state.hpp states, written here again
// (not the plugin's reader): the tests look at w, l, r and x through them.  And a temporary folder.
#pragma once

#include <gtest/gtest.h>
#include <plrt/pl_tensor.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace baguatest {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/plrt-bagua-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string file(int rank) const { return (path / ("strategy.bagua.rank" + std::to_string(rank) + ".bin")).string(); }
};

struct StateFile {
  std::string algorithm;
  int32_t rank = -1, world = -1;
  std::map<std::string, std::pair<int32_t, std::vector<uint8_t>>> entries;  // name -> (dtype, bytes)

  // Entry `name` as float32 values (fails the test when it is missing or not float32).
  std::vector<float> f32(const std::string& name) const {
    const auto it = entries.find(name);
    if (it == entries.end()) throw std::runtime_error("no entry " + name);
    if (it->second.first != PL_F32) throw std::runtime_error("entry " + name + " is not float32");
    std::vector<float> v(it->second.second.size() / 4);
    std::memcpy(v.data(), it->second.second.data(), v.size() * 4);
    return v;
  }
  std::vector<int64_t> i64(const std::string& name) const {
    const auto& bytes = entries.at(name).second;
    std::vector<int64_t> v(bytes.size() / 8);
    std::memcpy(v.data(), bytes.data(), v.size() * 8);
    return v;
  }
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Parses the format: "PLRTBAGU", u32 version 1, the algorithm, i32 rank, i32 world, u32 count,
// entries (u32 name length, name, i32 dtype, u64 size, bytes), u64 FNV-1a 64 of all before it.
inline StateFile read_state_file(const std::string& path) {
  const std::vector<uint8_t> in = read_bytes(path);
  size_t pos = 0;
  auto take = [&](size_t n) {
    if (n > in.size() - pos) throw std::runtime_error(path + ": truncated");
    const uint8_t* p = in.data() + pos;
    pos += n;
    return p;
  };
  auto u32 = [&] {
    uint32_t v;
    std::memcpy(&v, take(4), 4);
    return v;
  };
  auto str = [&] {
    const uint32_t n = u32();
    return std::string(reinterpret_cast<const char*>(take(n)), n);
  };
  if (std::memcmp(take(8), "PLRTBAGU", 8) != 0) throw std::runtime_error(path + ": no magic");
  if (u32() != 1) throw std::runtime_error(path + ": not version 1");
  StateFile st;
  st.algorithm = str();
  st.rank = static_cast<int32_t>(u32());
  st.world = static_cast<int32_t>(u32());
  const uint32_t count = u32();
  for (uint32_t i = 0; i < count; ++i) {
    const std::string name = str();
    const int32_t dtype = static_cast<int32_t>(u32());
    uint64_t n;
    std::memcpy(&n, take(8), 8);
    const uint8_t* p = take(n);
    st.entries[name] = {dtype, std::vector<uint8_t>(p, p + n)};
  }
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < pos; ++i) h = (h ^ in[i]) * 1099511628211ull;
  uint64_t sum;
  std::memcpy(&sum, take(8), 8);
  if (sum != h) throw std::runtime_error(path + ": checksum mismatch");
  if (pos != in.size()) throw std::runtime_error(path + ": trailing bytes");
  return st;
}

}  // namespace baguatest
