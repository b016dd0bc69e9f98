// A small C++ helper over the host's PL_StoreApi (the rendezvous store a process group is given):
// std::string values, errors thrown as plrt::plugin::Failure (the PL_Error is freed here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plugin_support.hpp"

namespace plrt::pg {

class StoreClient {
 public:
  StoreClient(const PL_Host* host, PL_Store* store) : host_(host), api_(host->store_api), store_(store) {}

  void set(const std::string& key, const std::string& value) const {
    check(api_->set(store_, key.c_str(), value.data(), value.size()));
  }
  // Waits up to timeout_ms (<= 0: the store's own timeout) for `key`.
  std::string get(const std::string& key, int64_t timeout_ms) const {
    PL_Bytes b{sizeof(PL_Bytes), nullptr, 0};
    check(api_->get(store_, key.c_str(), timeout_ms, &b));
    return take(b);
  }
  // The value of `key` if it exists now (a check, then a short get); nullopt otherwise.
  std::optional<std::string> try_get(const std::string& key) const {
    if (!exists(key)) return std::nullopt;
    return get(key, 1000);
  }
  int64_t add(const std::string& key, int64_t delta) const {
    int64_t v = 0;
    check(api_->add(store_, key.c_str(), delta, &v));
    return v;
  }
  // Sets `key` to `desired` if it holds `expected` (or is absent and `expected` is empty); returns
  // the value after the call.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) const {
    PL_Bytes b{sizeof(PL_Bytes), nullptr, 0};
    check(api_->compare_set(store_, key.c_str(), expected.data(), expected.size(), desired.data(), desired.size(), &b));
    return take(b);
  }
  bool exists(const std::string& key) const {
    const char* k = key.c_str();
    int32_t all = 0;
    check(api_->check(store_, &k, 1, &all));
    return all != 0;
  }
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) const {
    std::vector<const char*> p;
    p.reserve(keys.size());
    for (const auto& k : keys) p.push_back(k.c_str());
    check(api_->wait(store_, p.data(), p.size(), timeout_ms));
  }

  PL_Store* get_store() const { return store_; }

 private:
  void check(PL_Error* e) const {
    if (!e) return;
    plugin::Failure f(host_->error_code(e), host_->error_message(e));
    host_->error_destroy(e);
    throw f;
  }
  std::string take(PL_Bytes& b) const {
    std::string out;
    if (b.data && b.size) out.assign(static_cast<const char*>(b.data), b.size);
    if (b.data) api_->bytes_free(&b);
    return out;
  }
  const PL_Host* host_;
  const PL_StoreApi* api_;
  PL_Store* store_;
};

}  // namespace plrt::pg
