// The store's key-value map and TCPStore's semantics for each request (docs/store-protocol.md),
// without the network: the server (server.cpp) applies every authenticated request here and only
// parks the get/wait requests whose keys are missing and wakes them when a key is written.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/protocol.hpp"

namespace plrt::store {

// A key or value in messages: quoted, cut after `limit` bytes.
inline std::string in_quotes(const std::string& s, size_t limit = 64) {
  return "'" + (s.size() > limit ? s.substr(0, limit) + "..." : s) + "'";
}

struct Outcome {
  std::optional<Response> reply;  // none: a get or wait whose keys are missing must wait
  bool changed = false;           // r.key was written: its waiters may be answered now
};

class KeyValueMap {
 public:
  // Any request but HELLO; r's strings may be moved from.
  Outcome apply(Request& r);
  bool all_exist(const std::vector<std::string>& keys) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  const std::string& at(const std::string& key) const { return data_.at(key); }

 private:
  std::unordered_map<std::string, std::string> data_;
};

}  // namespace plrt::store
