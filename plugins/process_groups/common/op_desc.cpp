#include "op_desc.hpp"

#include "plugin_support.hpp"

namespace plrt::pg {

using plugin::fail;

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kAllToAll:
      return "all_to_all";
  }
  return "unknown";
}

const char* reduce_op_name(PL_ReduceOp op) {
  switch (op) {
    case PL_REDUCE_SUM:
      return "sum";
    case PL_REDUCE_AVG:
      return "avg";
    case PL_REDUCE_MIN:
      return "min";
    case PL_REDUCE_MAX:
      return "max";
    case PL_REDUCE_PRODUCT:
      return "product";
    default:
      return nullptr;
  }
}

namespace {

// FNV-1a over 64-bit words, finished with the splitmix64 avalanche: cheap (a multiply per word)
// and well mixed in every output bit, so the 32-bit fold is as good as any 32 bits.
struct Hasher {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(uint64_t v) { h = (h ^ v) * 0x100000001b3ull; }
  uint64_t done() const {
    uint64_t z = h;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

bool all_equal(const std::vector<int64_t>& v) {
  for (int64_t c : v)
    if (c != v.front()) return false;
  return true;
}

std::string counts_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  const size_t shown = v.size() > 16 ? 8 : v.size();
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (shown < v.size()) s += ", ... (" + std::to_string(v.size()) + " ranks)";
  return s + "]";
}

}  // namespace

uint64_t OpDesc::fingerprint(uint64_t seq) const {
  Hasher h;
  if (is_p2p()) {  // the same on both ends: what a send and its recv must agree on
    h.add(0x70327032u);
    h.add(static_cast<uint64_t>(static_cast<uint32_t>(user_tag)));
    h.add(static_cast<uint64_t>(static_cast<uint32_t>(dtype)));
    h.add(static_cast<uint64_t>(count));
    return h.done();
  }
  h.add(seq);
  h.add(static_cast<uint64_t>(kind));
  if (kind == OpKind::kAllToAll) {  // what every rank shares: per-rank counts differ by design
    h.add(static_cast<uint64_t>(static_cast<uint32_t>(dtype)));
    h.add(equal_chunks ? 1u : 2u);
    if (equal_chunks) h.add(static_cast<uint64_t>(count));
    return h.done();
  }
  h.add(static_cast<uint64_t>(static_cast<uint32_t>(reduce)));
  h.add(static_cast<uint64_t>(static_cast<uint32_t>(dtype)));
  h.add(static_cast<uint64_t>(static_cast<uint32_t>(peer)));
  h.add(static_cast<uint64_t>(static_cast<uint32_t>(user_tag)));
  h.add(static_cast<uint64_t>(count));
  h.add(counts.size());
  for (int64_t c : counts) h.add(static_cast<uint64_t>(c));
  return h.done();
}

std::string count_text(int64_t n) { return std::to_string(n) + (n == 1 ? " element" : " elements"); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  const size_t shown = ranks.size() > 32 ? 16 : ranks.size();
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (shown < ranks.size()) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

std::string OpDesc::args() const {
  const char* red = reduce_op_name(reduce);
  const std::string red_s = red ? red : "reduce op " + std::to_string(reduce);
  const std::string dt = pl_dtype_name(dtype);
  switch (kind) {
    case OpKind::kAllreduce:
      return red_s + ", " + dt + ", " + count_text(count);
    case OpKind::kBroadcast:
      return dt + ", " + count_text(count) + ", root " + std::to_string(peer);
    case OpKind::kAllgather:
      if (!counts.empty() && all_equal(counts)) return dt + ", " + count_text(counts[0]) + " from each rank";
      return dt + ", elements per rank " + counts_text(counts);
    case OpKind::kReduceScatter:
      if (!counts.empty() && all_equal(counts))
        return red_s + ", " + dt + ", " + count_text(counts[0]) + " to each rank";
      return red_s + ", " + dt + ", elements per rank " + counts_text(counts);
    case OpKind::kAllToAll:
      if (equal_chunks) return dt + ", " + count_text(count) + " in equal chunks";
      return dt + ", sends " + counts_text(counts) + ", receives " + counts_text(recv_counts);
    case OpKind::kBarrier:
      return "";
    case OpKind::kSend:
    case OpKind::kRecv:
      return "tag " + std::to_string(user_tag) + ", " + dt + ", " + count_text(count);
  }
  return "";
}

std::string OpDesc::text() const {
  if (kind == OpKind::kSend) return "send(to rank " + std::to_string(peer) + ", " + args() + ")";
  if (kind == OpKind::kRecv) return "recv(from rank " + std::to_string(peer) + ", " + args() + ")";
  return std::string(op_kind_name(kind)) + "(" + args() + ")";
}

std::string OpDesc::title(const std::string& backend, uint64_t seq) const {
  std::string t = backend + " " + op_kind_name(kind);
  if (kind == OpKind::kSend) return t + " to rank " + std::to_string(peer) + " (" + args() + ")";
  if (kind == OpKind::kRecv) return t + " from rank " + std::to_string(peer) + " (" + args() + ")";
  t += " #" + std::to_string(seq);
  const std::string a = args();
  return a.empty() ? t : t + " (" + a + ")";
}

// ---- argument checks ---------------------------------------------------------------------------

void check_tensor_arg(const PL_Tensor* t, const std::string& where, const char* what, PL_DeviceType device_type,
                      const char* device_rule) {
  try {
    plugin::check_tensor(t, what);
  } catch (const plugin::Failure& f) {
    fail(f.code, where + ": " + f.message);
  }
  if (t->device.type != device_type) {
    const char* name = t->device.type == PL_DEVICE_CPU ? "cpu" : t->device.type == PL_DEVICE_CUDA ? "cuda" : nullptr;
    const std::string dev = name ? std::string(name) + ":" + std::to_string(t->device.index)
                                 : "device type " + std::to_string(t->device.type);
    fail(PL_ERR_INVALID_ARGUMENT, where + ": " + what + " is on " + dev + ", but " + device_rule);
  }
}

void check_reduce_op(PL_ReduceOp op, const std::string& where) {
  if (reduce_op_name(op) == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT,
         where + ": unknown reduce op " + std::to_string(op) + " (valid: 1 sum, 2 avg, 3 min, 4 max, 5 product)");
}

void check_rank_arg(int64_t value, const std::string& where, const char* what, int world, int self, bool not_self) {
  if (value < 0 || value >= world)
    fail(PL_ERR_INVALID_ARGUMENT, where + ": " + what + " " + std::to_string(value) +
                                      " is out of range: valid ranks are 0.." + std::to_string(world - 1) +
                                      " (world size " + std::to_string(world) + ")");
  if (not_self && value == self)
    fail(PL_ERR_INVALID_ARGUMENT, where + ": " + what + " " + std::to_string(value) +
                                      " is this rank: send/recv need another rank of 0.." + std::to_string(world - 1));
}

void check_same_dtype(const PL_Tensor& a, const PL_Tensor& b, const std::string& where, const char* what_a,
                      const char* what_b) {
  if (a.dtype != b.dtype)
    fail(PL_ERR_INVALID_ARGUMENT, where + ": " + what_b + " is " + pl_dtype_name(b.dtype) + " but " + what_a + " is " +
                                      pl_dtype_name(a.dtype) + ": every tensor of one call has one dtype");
}

}  // namespace plrt::pg
