// low_precision_decentralized (docs/bagua.md §4): a ring of ranks exchanging uint8-compressed weight
// differences.  Gradients stay local (bucket_comm() is NULL).  Per weight bucket
// (weight_buckets.hpp: bucket_size_mb, reverse registration order; float32 only) each rank keeps
// three f32 copies, equal to the weights after setup's broadcast: w (its replica), l (its copy of
// the left neighbour's w), r (of the right neighbour's).  Every communication_interval optimizer
// steps (steps 0, I, 2I, ... counted by after_optimizer_step), after the optimizer step, per bucket,
// in this order (each line one accelerator call, rounded to f32):
//   t = x                       (pack)
//   t = t + f32(1/3) * l        (axpy)
//   t = t + f32(1/3) * r        (axpy)
//   t = t + f32(-5/3) * w       (axpy)
//   e = Q(t), one chunk         (quantize_u8: {min, max} then the bytes)
//   t = decode(e)               (dequantize_u8: d)
//   send e to left and right, receive e_left, e_right
//   l = l + decode(e_left);  r = r + decode(e_right);  w = w + t;  x = w (unpack)
// A neighbour decodes the same bytes with the same kernel and adds them with the same axpy, so each
// rank's l equals its left neighbour's w bit for bit, and r its right neighbour's.
//
// The ring's transfers are two rounds (send right / receive from left, then send left / receive
// from right; tags 2b and 2b+1 for bucket b, distinct when both neighbours are one rank, n = 2).
// In each round rank 0 sends first and every other rank receives first, so a backend that runs
// transfers one at a time (nccl) never waits on a send nobody receives.
//
// Checkpoints, counters and stats: WeightAlgorithm (weight_algorithm.hpp), with this rank's w, l
// and r (per parameter) added to its state file.  The encoded format is u8_codec.hpp's.
//
// Hierarchical (hierarchy.hpp): the ring is the nodes' leaders (n: the number of nodes), and only
// they keep w, l and r.  Per bucket every rank packs x and averages it inside the node (t = the
// node's mean of x); the leader runs the update above from that t; then it broadcasts w to its
// node, and every rank sets x = w.
#include <chrono>
#include <cstring>

#include "bagua_strategy.hpp"
#include "reducer.hpp"
#include "u8_codec.hpp"
#include "weight_algorithm.hpp"

namespace plrt::bagua {

using plugin::fail;
using strategy::check;

namespace {

constexpr const char* kLowPrecisionDecentralized = "low_precision_decentralized";
const char* const kCopies[3] = {"w", "l", "r"};

struct RingBucket {
  ValueBucket v;
  int64_t stride = 0;  // bytes of an encoded bucket: {min, max}, the bytes, padded to 4
  strategy::DeviceMemory mem[3], t_mem, tmp_mem, enc_mem;
  PL_Tensor copy[3]{};   // w, l, r (f32, v.numel)
  PL_Tensor t{}, tmp{};  // scratch (f32, v.numel)
  PL_Tensor enc[3]{};    // own, from the left, from the right (u8, stride each)
};

class LowPrecisionDecentralized final : public WeightAlgorithm {
 public:
  LowPrecisionDecentralized(const BaguaOptions& o, int32_t world, int32_t rank, const Scope& scope)
      : WeightAlgorithm(kLowPrecisionDecentralized, o.communication_interval, world, rank, scope) {}

  std::vector<std::string> needs() const override { return {"send", "recv"}; }

  void after_optimizer_step(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    if (!exchange_due(c)) return;
    const auto t0 = std::chrono::steady_clock::now();
    for (RingBucket& b : buckets_) {
      const std::string what = s.who + ": low_precision_decentralized's update of " + b.v.name;
      pack_values(c, b.v, b.t);  // x
      if (s.hier) s.hier.node_reduce(b.t, PL_REDUCE_AVG, what + ": the average inside the node");
      if (ring_) exchange(c, b);
      PL_Tensor& x = ring_ ? b.copy[0] : b.t;  // w: the leader's, which a non-leader receives
      if (s.hier) s.hier.node_broadcast(x, what + ": the leader's replica to its node");
      unpack_values(c, b.v, x);
    }
    exchanged(t0);
  }

 private:
  void make_buffers(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    buckets_.clear();
    for (size_t i = 0; i < c.num_params; ++i) {
      const PL_Parameter& p = c.params[i];
      if (pl_parameter_kind(&p) == PL_PARAM_TRAINABLE && p.value.dtype != PL_F32)
        fail(PL_ERR_UNSUPPORTED, s.who +
                                     ": algorithm low_precision_decentralized keeps float32 replicas of the weights; " +
                                     c.param_name(i) + " is " + pl_dtype_name(p.value.dtype) +
                                     " (use float32 parameters, or algorithm=decentralized)");
    }
    if (!c.group) return;  // one rank: no ring
    ring_ = !s.hier || s.hier.leader();
    if (ring_) require_codec(c.dev, s.who, kLowPrecisionDecentralized);
    auto plan = plan_value_buckets(c, s.opts.bucket_size_mb);
    buckets_.resize(plan.size());
    for (size_t b = 0; b < plan.size(); ++b) {
      RingBucket& k = buckets_[b];
      k.v = std::move(plan[b]);
      const size_t bytes = k.v.plan.bytes;
      const std::string what = s.who + ": allocating low_precision_decentralized's buffers of " + k.v.name;
      k.t_mem = strategy::DeviceMemory(c.dev, bytes, what);
      k.t = k.v.view(c, k.t_mem.get());
      if (!ring_) {  // hierarchical, not a leader: x to the node's mean, and the leader's w back
        bytes_ += 2.0 * static_cast<double>(bytes);
        continue;
      }
      for (int j = 0; j < 3; ++j) {
        k.mem[j] = strategy::DeviceMemory(c.dev, bytes, what);
        k.copy[j] = k.v.view(c, k.mem[j].get());
      }
      k.tmp_mem = strategy::DeviceMemory(c.dev, bytes, what);
      k.tmp = k.v.view(c, k.tmp_mem.get());
      k.stride = encoded_bytes(k.v.numel);
      k.enc_mem = strategy::DeviceMemory(c.dev, static_cast<size_t>(3 * k.stride), what);
      for (int j = 0; j < 3; ++j)
        k.enc[j] = u8_view(k.t, static_cast<uint8_t*>(k.enc_mem.get()) + j * k.stride, k.stride);
      // w = l = r = the weights after the start-up broadcast: equal on every rank.
      pack_values(c, k.v, k.copy[0]);
      for (int j = 1; j < 3; ++j)
        c.dev.copy(k.copy[j].data, c.dev.device, k.copy[0].data, c.dev.device, bytes,
                   s.who + ": initialising the neighbour replicas of " + k.v.name);
      bytes_ += 2.0 * static_cast<double>(k.stride);
    }
  }
  void free_buffers() noexcept override { buckets_.clear(); }

  void save_extra(const ddp::DdpStrategy& c, RankState& st) const override {
    const std::vector<int32_t> ring = ring_place();
    std::vector<uint8_t> place(ring.size() * 4);
    std::memcpy(place.data(), ring.data(), place.size());
    st.add("ring", PL_I32, std::move(place));
    if (!ring_) return;  // hierarchical, not a leader: no replicas
    for (const RingBucket& b : buckets_)
      for (size_t m = 0; m < b.v.parts.size(); ++m)
        for (int j = 0; j < 3; ++j) {
          const PL_Tensor part = member(b, j, m);
          std::vector<uint8_t> bytes(static_cast<size_t>(part.numel) * 4);
          c.dev.copy(bytes.data(), PL_Device{PL_DEVICE_CPU, 0}, part.data, c.dev.device, bytes.size(),
                     c.who + ": save_state: reading replica " + kCopies[j] + " of " + b.v.name);
          st.add(key(c, j, b.v.plan.members[m]), PL_F32, std::move(bytes));
        }
  }

  std::function<void()> load_extra(const ddp::DdpStrategy& c, const RankState& st, const std::string& file) override {
    const std::vector<int32_t> ring = ring_place();
    const StateEntry& place = st.get(c.who, file, "ring", PL_I32, ring.size() * 4);
    std::vector<int32_t> saved(ring.size());
    std::memcpy(saved.data(), place.bytes.data(), place.bytes.size());
    if (saved != ring)
      fail(PL_ERR_INVALID_ARGUMENT, c.who + ": load_state: " + file + " was saved " + describe_place(saved) +
                                        ", and this job's rank is " + describe_place(ring) +
                                        ": the replicas belong to another ring (resume with the same number of "
                                        "nodes and the same hierarchical option)");
    std::vector<const StateEntry*> replicas;  // every bucket's members' w, l, r, checked before any change
    if (!ring_) return {};
    for (RingBucket& b : buckets_)
      for (size_t m = 0; m < b.v.parts.size(); ++m)
        for (int j = 0; j < 3; ++j)
          replicas.push_back(&st.get(c.who, file, key(c, j, b.v.plan.members[m]), PL_F32,
                                     static_cast<size_t>(b.v.parts[m].numel) * 4));
    return [this, &c, replicas] {
      size_t n = 0;
      for (RingBucket& b : buckets_)
        for (size_t m = 0; m < b.v.parts.size(); ++m)
          for (int j = 0; j < 3; ++j) {
            const PL_Tensor part = member(b, j, m);
            c.dev.copy(part.data, c.dev.device, replicas[n++]->bytes.data(), PL_Device{PL_DEVICE_CPU, 0},
                       static_cast<size_t>(part.numel) * 4,
                       c.who + ": load_state: restoring replica " + kCopies[j] + " of " + b.v.name);
          }
    };
  }

  // The ring's update of bucket b from t (this rank's x, or its node's mean): w, l and r.
  void exchange(ddp::DdpStrategy& c, RingBucket& b) {
    const PL_AcceleratorApi* a = c.dev.api;
    const std::string what = c.who + ": low_precision_decentralized's update of " + b.v.name;
    check(c.host, a->axpy(c.dev.acc, &b.t, 1.0 / 3.0, &b.copy[1], nullptr), what);
    check(c.host, a->axpy(c.dev.acc, &b.t, 1.0 / 3.0, &b.copy[2], nullptr), what);
    check(c.host, a->axpy(c.dev.acc, &b.t, -5.0 / 3.0, &b.copy[0], nullptr), what);
    encode(c, b, b.t, 0);
    decode(c, b, 0, b.t);  // d
    const int32_t n = scope_.world, left = (scope_.rank + n - 1) % n, right = (scope_.rank + 1) % n;
    const int32_t tag = static_cast<int32_t>(2 * b.v.index);
    {
      Transfers tr(c, scope_.on(c), c.who + ": low_precision_decentralized's exchange of " + b.v.name);
      if (scope_.rank == 0) {
        tr.send(b.enc[0], right, tag);
        tr.recv(b.enc[1], left, tag);
        tr.send(b.enc[0], left, tag + 1);
        tr.recv(b.enc[2], right, tag + 1);
      } else {
        tr.recv(b.enc[1], left, tag);
        tr.send(b.enc[0], right, tag);
        tr.recv(b.enc[2], right, tag + 1);
        tr.send(b.enc[0], left, tag + 1);
      }
      tr.wait_all();
    }
    for (int j = 1; j < 3; ++j) {  // l += decode(from the left), r += decode(from the right)
      decode(c, b, j, b.tmp);
      check(c.host, a->axpy(c.dev.acc, &b.copy[j], 1.0, &b.tmp, nullptr), what);
    }
    check(c.host, a->axpy(c.dev.acc, &b.copy[0], 1.0, &b.t, nullptr), what);
  }

  // Q of `src` (one chunk) into encoded buffer j.
  void encode(ddp::DdpStrategy& c, RingBucket& b, const PL_Tensor& src, int j) const {
    encode_chunk(c.dev, src, b.enc[j], 0, c.who + ": low_precision_decentralized's quantization of " + b.v.name);
  }
  // Encoded buffer j decoded into `dst`.
  void decode(ddp::DdpStrategy& c, RingBucket& b, int j, PL_Tensor& dst) const {
    static const char* const from[3] = {"this rank", "the left neighbour", "the right neighbour"};
    decode_chunk(c.dev, b.enc[j], 0, dst,
                 c.who + ": low_precision_decentralized's decoding of " + b.v.name + " from " + from[j]);
  }
  // This rank's place in the ring, as state files record it: {ring size, position}, {0, -1} off it.
  std::vector<int32_t> ring_place() const {
    if (!ring_) return {0, -1};
    return {scope_.world, scope_.rank};
  }
  static std::string describe_place(const std::vector<int32_t>& p) {
    if (p[0] == 0) return "off the ring (a hierarchical node's non-leader)";
    return "at position " + std::to_string(p[1]) + " of a ring of " + std::to_string(p[0]);
  }
  // Member m's elements of replica j (w, l, r).
  static PL_Tensor member(const RingBucket& b, int j, size_t m) {
    return reducer::sub_view(b.copy[j], b.v.offsets[m], b.v.parts[m].numel);
  }
  static std::string key(const ddp::DdpStrategy& c, int j, size_t i) {
    return std::string(kCopies[j]) + "/" + std::to_string(i) + "/" + c.names[i];
  }

  std::vector<RingBucket> buckets_;
  bool ring_ = true;  // this rank is in the ring (keeps w, l, r): not a hierarchical non-leader
};

}  // namespace

std::unique_ptr<Algorithm> make_low_precision_decentralized(const BaguaOptions& opts, const PL_StrategyConfig& c,
                                                            const Scope& scope) {
  return std::make_unique<LowPrecisionDecentralized>(opts, c.world_size, c.global_rank, scope);
}

}  // namespace plrt::bagua
