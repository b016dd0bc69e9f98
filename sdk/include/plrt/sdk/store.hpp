// pl::Store: the rendezvous key-value store (PyTorch TCPStore semantics) over the runtime's C API.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <vector>

namespace pl {

struct StoreOptions {
  std::optional<std::string> host;        // default: $MASTER_ADDR, else 127.0.0.1
  int port = -1;                          // -1: $MASTER_PORT; 0 with is_server: a free port
  bool is_server = false;                 // serve the store in this process (and connect to it)
  std::optional<std::string> token;       // default: $PL_JOB_TOKEN
  std::chrono::milliseconds timeout{0};   // connecting and each wait; 0: 5 minutes
  std::optional<std::string> key_prefix;  // before every key; default: $PL_STORE_PREFIX (plrun's round)
};

class Store {
 public:
  Store(const Runtime& runtime, const StoreOptions& options) : host_(runtime.host()) {
    PL_TcpStoreOptions o{};
    o.struct_size = sizeof o;
    o.host = options.host ? options.host->c_str() : nullptr;
    o.port = options.port;
    o.is_server = options.is_server ? 1 : 0;
    o.token = options.token ? options.token->c_str() : nullptr;
    o.timeout_ms = options.timeout.count();
    o.key_prefix = options.key_prefix ? options.key_prefix->c_str() : nullptr;
    PL_Store* s = nullptr;
    check(pl_store_create_tcp(runtime.get(), &o, &s));
    store_.reset(s);
  }

  PL_Store* get() const { return store_.get(); }
  int port() const { return pl_store_port(store_.get()); }

  void set(const std::string& key, const std::string& value) const {
    check(host_, api()->set(get(), key.c_str(), value.data(), value.size()));
  }
  // Waits for `key` (up to `timeout`; 0: the store's timeout) and returns its value.
  std::string get(const std::string& key, std::chrono::milliseconds timeout = {}) const {
    PL_Bytes b{sizeof(PL_Bytes), nullptr, 0};
    check(host_, api()->get(get(), key.c_str(), timeout.count(), &b));
    return take(b);
  }
  int64_t add(const std::string& key, int64_t delta) const {
    int64_t v = 0;
    check(host_, api()->add(get(), key.c_str(), delta, &v));
    return v;
  }
  // Sets `key` to `desired` if it holds `expected` (or is absent and `expected` is empty);
  // returns the value after the call.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) const {
    PL_Bytes b{sizeof(PL_Bytes), nullptr, 0};
    check(host_,
          api()->compare_set(get(), key.c_str(), expected.data(), expected.size(), desired.data(), desired.size(), &b));
    return take(b);
  }
  bool remove(const std::string& key) const {
    int32_t removed = 0;
    check(host_, api()->remove(get(), key.c_str(), &removed));
    return removed != 0;
  }
  bool check_keys(const std::vector<std::string>& keys) const {
    auto ptrs = c_strs(keys);
    int32_t all = 0;
    check(host_, api()->check(get(), ptrs.data(), ptrs.size(), &all));
    return all != 0;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout = {}) const {
    auto ptrs = c_strs(keys);
    check(host_, api()->wait(get(), ptrs.data(), ptrs.size(), timeout.count()));
  }
  int64_t num_keys() const {
    int64_t n = 0;
    check(host_, api()->num_keys(get(), &n));
    return n;
  }

 private:
  const PL_StoreApi* api() const { return host_->store_api; }
  std::string take(PL_Bytes& b) const {
    std::string out(static_cast<const char*>(b.data), b.size);
    api()->bytes_free(&b);
    return out;
  }
  static std::vector<const char*> c_strs(const std::vector<std::string>& keys) {
    std::vector<const char*> p;
    for (const auto& k : keys) p.push_back(k.c_str());
    return p;
  }
  struct Deleter {
    void operator()(PL_Store* s) const { pl_store_destroy(s); }
  };
  const PL_Host* host_;
  std::unique_ptr<PL_Store, Deleter> store_;
};

}  // namespace pl
