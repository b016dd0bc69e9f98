// decentralized (docs/bagua.md §3): the ranks average WEIGHTS, not gradients.  The gradients stay
// local (bucket_comm() is NULL: create.cpp puts LocalGradients on the reducer).  Every
// communication_interval optimizer steps (steps 0, I, 2I, ... counted by before_optimizer_step),
// before the optimizer step, each weight bucket (weight_buckets.hpp) is averaged:
//   all        one allreduce AVG of the packed values (the process group's mean: the sum, then one
//              division by n);
//   shift_one  with one peer (the formula of docs/bagua.md, k counting exchanges from 0): send the
//              packed values to it, receive its, then x = x + x_peer (axpy, rounded to the dtype)
//              and x = x * 0.5 (scale, exact), so both ranks of a pair hold the same bits.
// Then the host's optimizer applies the local gradient (ddp's optimizer_step).
//
// Hierarchical (hierarchy.hpp): each bucket is first averaged inside the node, the leaders then
// average it as above among themselves (shift_one pairs nodes: n is the number of nodes), and each
// leader broadcasts the result to its node.
//
// Transfers on a backend that runs them one at a time (nccl) must meet: the lower rank of a pair
// sends then receives, the higher receives then sends.  Tags: the bucket's index.
//
// Checkpoints, counters and stats: WeightAlgorithm (weight_algorithm.hpp): this rank's own
// trainable values (each rank's differ) and its step and exchange counters, per rank; the host
// saves each rank's optimizer state per rank too (local_optimizer_state).
#include <chrono>

#include "bagua_strategy.hpp"
#include "weight_algorithm.hpp"

namespace plrt::bagua {

using plugin::fail;
using strategy::check;

namespace {

constexpr const char* kDecentralized = "decentralized";

// docs/bagua.md §3: rank i's peer at exchange k (n even).
int32_t shift_one_peer(int32_t i, int32_t n, int64_t k) {
  const int64_t h = n / 2, km = k % h;
  if (i < h) return static_cast<int32_t>(h + (km + i) % h);
  return static_cast<int32_t>(((i - h - km) % h + h) % h);
}

struct Slot {
  ValueBucket v;
  strategy::DeviceMemory own, peer;  // the packed values; the peer's (shift_one)
  PL_Tensor flat{}, peer_flat{};
};

class Decentralized final : public WeightAlgorithm {
 public:
  Decentralized(const BaguaOptions& o, int32_t world, int32_t rank, const Scope& scope)
      : WeightAlgorithm(kDecentralized, o.communication_interval, world, rank, scope),
        shift_one_(o.peer_selection == PeerSelection::kShiftOne) {}

  std::vector<std::string> needs() const override {
    if (shift_one_) return {"send", "recv"};
    return {};
  }

  void before_optimizer_step(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    if (!exchange_due(c)) return;
    const auto t0 = std::chrono::steady_clock::now();
    const bool exchanges = !s.hier || s.hier.leader();  // hierarchical: the leaders only
    const int32_t peer = shift_one_ ? shift_one_peer(scope_.rank, scope_.world, exchanges_) : -1;
    for (Slot& b : slots_) {
      const std::string what = s.who + ": decentralized's average of " + b.v.name;
      pack_values(c, b.v, b.flat);
      if (s.hier) s.hier.node_reduce(b.flat, PL_REDUCE_AVG, what + " inside the node");
      if (exchanges && shift_one_)
        average_with(c, b, peer);
      else if (exchanges)
        scope_.on(c).allreduce(b.flat, PL_REDUCE_AVG, what);
      if (s.hier) s.hier.node_broadcast(b.flat, what + ": the leader's to its node");
      unpack_values(c, b.v, b.flat);
    }
    exchanged(t0);
  }

 private:
  void make_buffers(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    slots_.clear();
    if (!c.group) return;  // one rank: nothing to average
    const PL_AcceleratorApi* a = c.dev.api;
    if (shift_one_ && (a->axpy == nullptr || a->scale == nullptr))
      fail(PL_ERR_UNSUPPORTED, s.who + ": peer_selection_mode=shift_one needs the accelerator's axpy and scale");
    auto plan = plan_value_buckets(c, s.opts.bucket_size_mb);
    slots_.resize(plan.size());
    for (size_t b = 0; b < plan.size(); ++b) {
      Slot& k = slots_[b];
      k.v = std::move(plan[b]);
      k.own = strategy::DeviceMemory(c.dev, k.v.plan.bytes, s.who + ": allocating the buffer of " + k.v.name);
      k.flat = k.v.view(c, k.own.get());
      if (shift_one_) {
        k.peer = strategy::DeviceMemory(c.dev, k.v.plan.bytes, s.who + ": allocating the peer buffer of " + k.v.name);
        k.peer_flat = k.v.view(c, k.peer.get());
      }
      bytes_ += static_cast<double>(k.v.plan.bytes);
    }
  }
  void free_buffers() noexcept override { slots_.clear(); }

  // shift_one: the packed bucket with `peer` (a rank of the scope), then the average.
  void average_with(ddp::DdpStrategy& c, Slot& b, int32_t peer) {
    const int32_t tag = static_cast<int32_t>(b.v.index);
    const std::string with =
        (scope_.group != nullptr ? " with the leader of node " : " with rank ") + std::to_string(peer);
    Transfers t(c, scope_.on(c), c.who + ": decentralized's exchange of " + b.v.name + with);
    if (scope_.rank < peer) {
      t.send(b.flat, peer, tag);
      t.recv(b.peer_flat, peer, tag);
    } else {
      t.recv(b.peer_flat, peer, tag);
      t.send(b.flat, peer, tag);
    }
    t.wait_all();
    const std::string what = c.who + ": decentralized's average of " + b.v.name + with;
    check(c.host, c.dev.api->axpy(c.dev.acc, &b.flat, 1.0, &b.peer_flat, nullptr), what);
    check(c.host, c.dev.api->scale(c.dev.acc, &b.flat, 0.5, nullptr), what);
  }

  bool shift_one_;
  std::vector<Slot> slots_;
};

}  // namespace

std::unique_ptr<Algorithm> make_decentralized(const BaguaOptions& opts, const PL_StrategyConfig& c,
                                              const Scope& scope) {
  return std::make_unique<Decentralized>(opts, c.world_size, c.global_rank, scope);
}

}  // namespace plrt::bagua
