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
// Transfers on a backend that runs them one at a time (nccl) must meet: the lower rank of a pair
// sends then receives, the higher receives then sends.  Tags: the bucket's index.
//
// Checkpoints (per rank, rank_state.hpp): this rank's own trainable values (each rank's differ),
// its step and exchange counters.  load_state reads them and puts the values back at the next
// run_step, after the host has loaded rank 0's model into every rank.  The optimizer state is the
// host's (one file, rank 0's).
#include <chrono>
#include <cstring>

#include "algorithm.hpp"
#include "bagua_strategy.hpp"
#include "weight_buckets.hpp"

namespace plrt::bagua {

using plugin::fail;
using strategy::check;

namespace {

constexpr const char* kName = "decentralized";

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

class Decentralized final : public Algorithm {
 public:
  Decentralized(const BaguaOptions& o, int32_t world, int32_t rank)
      : interval_(o.communication_interval),
        shift_one_(o.peer_selection == PeerSelection::kShiftOne),
        world_(world),
        rank_(rank) {}

  std::unique_ptr<reducer::BucketComm> bucket_comm() override { return nullptr; }
  std::vector<std::string> needs() const override {
    if (shift_one_) return {"send", "recv"};
    return {};
  }

  void setup(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    slots_.clear();
    steps_ = exchanges_ = 0;
    comm_ms_ = 0;
    bytes_ = 0;
    pending_ = PendingValues();
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

  void run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn) override {
    if (pending_.pending()) pending_.apply(*s.core);  // this rank's own values, after the host's load
    Algorithm::run_step(s, fn);
  }

  void before_optimizer_step(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    const int64_t k = steps_++;
    if (!c.group || k % interval_ != 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    if (shift_one_)
      exchange_with(c, shift_one_peer(rank_, world_, exchanges_));
    else
      for (Slot& b : slots_) {
        pack_values(c, b.v, b.flat);
        c.group.allreduce(b.flat, PL_REDUCE_AVG, s.who + ": decentralized's average of " + b.v.name);
        unpack_values(c, b.v, b.flat);
      }
    ++exchanges_;
    comm_ms_ += ms_since(t0);
  }

  // Frees the buffers while the core's device context, which they point to, still lives (the core
  // goes before the algorithm).
  void teardown(BaguaStrategy& s) noexcept override {
    (void)s;
    slots_.clear();
    pending_ = PendingValues();
  }

  bool has_state() const override { return true; }
  bool local_optimizer_state() const override { return true; }  // gradients stay local

  void save_state(BaguaStrategy& s, const std::string& dir) override {
    require_setup(*s.core, "save_state");
    RankState st;
    st.algorithm = kName;
    st.rank = rank_;
    st.world = world_;
    st.add("counters", PL_I64, counters_bytes());
    pending_.save(*s.core, st);
    write_state(s.who, state_path(dir, rank_), st);
  }

  void load_state(BaguaStrategy& s, const std::string& dir, int32_t saved_world) override {
    require_setup(*s.core, "load_state");
    check_saved_world(s.who, saved_world, world_);
    const std::string file = state_path(dir, rank_);
    const RankState st = read_state(s.who, file, kName, rank_, world_);
    const StateEntry& counters = st.get(s.who, file, "counters", PL_I64, 2 * sizeof(int64_t));
    PendingValues values;
    values.load(*s.core, st, file);
    // Every check passed: the changes.
    std::memcpy(&steps_, counters.bytes.data(), sizeof steps_);
    std::memcpy(&exchanges_, counters.bytes.data() + sizeof steps_, sizeof exchanges_);
    pending_ = std::move(values);
  }

  double bytes_per_step(const BaguaStrategy& s) const override {
    (void)s;
    return bytes_;
  }
  void add_stats(const BaguaStrategy& s, StatList& out) const override {
    (void)s;
    out.emplace_back("exchanges", static_cast<double>(exchanges_));
    out.emplace_back("weight_comm_ms", comm_ms_);
  }

 private:
  // shift_one: every bucket with `peer`, then the average.
  void exchange_with(ddp::DdpStrategy& c, int32_t peer) {
    for (Slot& b : slots_) {
      pack_values(c, b.v, b.flat);
      const int32_t tag = static_cast<int32_t>(b.v.index);
      Transfers t(c, c.who + ": decentralized's exchange of " + b.v.name + " with rank " + std::to_string(peer));
      if (rank_ < peer) {
        t.send(b.flat, peer, tag);
        t.recv(b.peer_flat, peer, tag);
      } else {
        t.recv(b.peer_flat, peer, tag);
        t.send(b.flat, peer, tag);
      }
      t.wait_all();
      const std::string what =
          c.who + ": decentralized's average of " + b.v.name + " with rank " + std::to_string(peer);
      check(c.host, c.dev.api->axpy(c.dev.acc, &b.flat, 1.0, &b.peer_flat, nullptr), what);
      check(c.host, c.dev.api->scale(c.dev.acc, &b.flat, 0.5, nullptr), what);
      unpack_values(c, b.v, b.flat);
    }
  }

  std::vector<uint8_t> counters_bytes() const {
    std::vector<uint8_t> out(2 * sizeof(int64_t));
    std::memcpy(out.data(), &steps_, sizeof steps_);
    std::memcpy(out.data() + sizeof steps_, &exchanges_, sizeof exchanges_);
    return out;
  }

  int64_t interval_;
  bool shift_one_;
  int32_t world_, rank_;
  std::vector<Slot> slots_;
  int64_t steps_ = 0;      // before_optimizer_step calls since setup (or as loaded)
  int64_t exchanges_ = 0;  // averages done
  double comm_ms_ = 0, bytes_ = 0;
  PendingValues pending_;
};

}  // namespace

std::unique_ptr<Algorithm> make_decentralized(const BaguaOptions& opts, const PL_StrategyConfig& c) {
  return std::make_unique<Decentralized>(opts, c.world_size, c.global_rank);
}

}  // namespace plrt::bagua
