// The bound on connections that have not sent the handshake (see admission.hpp).
#include "store/admission.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace plrt::store {

AdmissionLimits AdmissionLimits::for_open_file_limit(uint64_t open_files) {
  AdmissionLimits l;
  l.total = static_cast<size_t>(std::clamp<uint64_t>(open_files / 4, kMinimum, kTotal));
  l.per_peer = std::min(kPerPeer, l.total);
  return l;
}

AdmissionLimits AdmissionLimits::for_this_process() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return for_open_file_limit(UINT64_MAX);
  return for_open_file_limit(rl.rlim_cur);
}

std::vector<Eviction> PendingConnections::admit(uint64_t id, const std::string& address) {
  std::vector<Eviction> evicted;
  forget(id);
  if (auto it = by_peer_.find(address); it != by_peer_.end() && it->second.size() >= limits_.per_peer) {
    evicted.push_back({it->second.front(), true});
    forget(evicted.back().id);
  }
  while (!order_.empty() && order_.size() >= limits_.total) {
    evicted.push_back({order_.front().id, false});
    forget(evicted.back().id);
  }
  order_.push_back({id, address});
  auto& peer = by_peer_[address];
  peer.push_back(id);
  where_[id] = {std::prev(order_.end()), std::prev(peer.end())};
  return evicted;
}

void PendingConnections::forget(uint64_t id) {
  auto it = where_.find(id);
  if (it == where_.end()) return;
  auto peer = by_peer_.find(it->second.in_order->address);
  peer->second.erase(it->second.in_peer);
  if (peer->second.empty()) by_peer_.erase(peer);
  order_.erase(it->second.in_order);
  where_.erase(it);
}

std::optional<uint64_t> PendingConnections::oldest() const {
  if (order_.empty()) return std::nullopt;
  return order_.front().id;
}

size_t PendingConnections::from(const std::string& address) const {
  auto it = by_peer_.find(address);
  return it == by_peer_.end() ? 0 : it->second.size();
}

}  // namespace plrt::store
