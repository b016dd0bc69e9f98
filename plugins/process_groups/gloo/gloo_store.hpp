// gloo::rendezvous::Store over the host's PL_StoreApi: gloo has no TCP store of its own, so its
// rendezvous (connectFullMesh: every rank publishes its pairs' addresses and reads the others')
// goes through the group's rendezvous store, each key prefixed with the group's key prefix.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "store_client.hpp"

namespace plrt::gloo_pg {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // `prefix` (e.g. "default/1/gloo") is joined to every key with '/'; `timeout` bounds every wait.
  GlooStore(const pg::StoreClient& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(join(key), std::string(data.begin(), data.end()));
  }

  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.get(join(key), timeout_.count());
    return std::vector<char>(v.begin(), v.end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(join(k));
    store_.wait(full, timeout.count() > 0 ? timeout.count() : timeout_.count());
  }

  std::string join(const std::string& key) const { return prefix_ + "/" + key; }

 private:
  const pg::StoreClient& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace plrt::gloo_pg
