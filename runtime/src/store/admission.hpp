// The server's bound on connections that have not finished the handshake ("pending"): at most
// `per_peer` from one address and `total` in all.  A new connection over a limit is admitted and
// the OLDEST pending connection (from that address, or of all) is closed instead: a real client
// sends HELLO as soon as it connects, so the oldest pending connection is the one most likely to
// be idle, and refusing the newest would lock out the job's own workers whenever a flood comes
// from their address (on one node every worker connects from 127.0.0.1).  A client whose pending
// connection is closed anyway retries (client.cpp).  Authenticated connections are not counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace plrt::store {

struct AdmissionLimits {
  size_t per_peer = 0;
  size_t total = 0;

  static constexpr size_t kPerPeer = 64;
  static constexpr size_t kTotal = 512;
  static constexpr size_t kMinimum = 16;
  // kTotal, or a quarter of `open_files` (the process's soft RLIMIT_NOFILE) when that is lower, so
  // that pending connections alone cannot take more than a quarter of the descriptors (at least
  // kMinimum); per_peer is kPerPeer, or total when that is lower.
  static AdmissionLimits for_open_file_limit(uint64_t open_files);
  // The same for this process's soft RLIMIT_NOFILE now.
  static AdmissionLimits for_this_process();
};

struct Eviction {
  uint64_t id;
  bool per_peer;  // over the limit for its address (else over the total)
};

class PendingConnections {
 public:
  explicit PendingConnections(AdmissionLimits limits) : limits_(limits) {}

  // A new pending connection `id` from `address` (an IP address, without the port).  Returns the
  // ids to close first, oldest first: the oldest from `address` if it is at its limit, the oldest
  // of all if the total is.  They are forgotten here already.
  std::vector<Eviction> admit(uint64_t id, const std::string& address);
  // `id` finished the handshake or was closed (an unknown id is ignored).
  void forget(uint64_t id);
  // The connection that has been pending longest (to free a descriptor when accept runs out).
  std::optional<uint64_t> oldest() const;

  size_t size() const { return order_.size(); }
  size_t from(const std::string& address) const;
  const AdmissionLimits& limits() const { return limits_; }

 private:
  struct Entry {
    uint64_t id;
    std::string address;
  };
  AdmissionLimits limits_;
  std::list<Entry> order_;                                        // oldest first
  std::unordered_map<std::string, std::list<uint64_t>> by_peer_;  // oldest first, per address
  struct Where {
    std::list<Entry>::iterator in_order;
    std::list<uint64_t>::iterator in_peer;
  };
  std::unordered_map<uint64_t, Where> where_;
};

}  // namespace plrt::store
