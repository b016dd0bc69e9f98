// What one process-group operation is, as every rank must agree on it: the descriptor, its
// fingerprint (folded into the backend's tag) and its human-readable text; plus the argument checks
// that every backend shares.  Backend-independent: the C ABI and the standard library only.
#pragma once

#include <plrt/pl_process_group.h>

#include <cstdint>
#include <string>
#include <vector>

namespace plrt::pg {

enum class OpKind : uint8_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,
  kReduceScatter = 4,
  kBarrier = 5,
  kSend = 6,
  kRecv = 7,
  kAllToAll = 8
};

const char* op_kind_name(OpKind kind);  // "allreduce", "reduce_scatter", "send", ...
// "sum", "avg", "min", "max", "product"; nullptr for an unknown op.
const char* reduce_op_name(PL_ReduceOp op);

struct OpDesc {
  OpKind kind = OpKind::kBarrier;
  PL_ReduceOp reduce = 0;             // allreduce, reduce_scatter; 0 otherwise
  PL_DType dtype = PL_DTYPE_INVALID;  // every op but barrier
  int32_t peer = -1;                  // broadcast: root; send: dst; recv: src
  int32_t user_tag = 0;               // send, recv
  int64_t count = 0;                  // allreduce, broadcast, send, recv, all_to_all: elements
  std::vector<int64_t> counts;        // allgather, reduce_scatter: elements of each rank;
                                      // all_to_all: elements sent to each rank (input_counts)
  std::vector<int64_t> recv_counts;   // all_to_all: elements received from each rank (output_counts)
  // all_to_all: both count arrays were NULL (equal chunks).  Then the element count is part of the
  // fingerprint (every rank must pass the same numel); otherwise the counts differ per rank by
  // design, stay out of the fingerprint, and the backend checks them by exchanging them.
  bool equal_chunks = false;

  bool is_p2p() const { return kind == OpKind::kSend || kind == OpKind::kRecv; }

  // 64-bit hash of the descriptor and `seq`: equal descriptors (and seq) hash equal on every rank
  // and platform.  For send/recv only what both ends share: tag, dtype and count.
  uint64_t fingerprint(uint64_t seq = 0) const;
  // "sum, float32, 7 elements"  (the arguments; "" for a barrier)
  std::string args() const;
  // "allreduce(sum, float32, 7 elements)"
  std::string text() const;
  // "gloo allreduce #12 (sum, float32, 7 elements)"; send/recv carry no number:
  // "gloo send to rank 1 (tag 3, float32, 7 elements)".
  std::string title(const std::string& backend, uint64_t seq) const;
};

// The 32-bit tag a backend gives the operation: different descriptors or sequence numbers give
// different tags (up to 32-bit collisions), so mismatched calls never exchange data.
inline uint32_t fold_tag(uint64_t fingerprint) { return static_cast<uint32_t>(fingerprint ^ (fingerprint >> 32)); }

// "element" / "elements" after a count.
std::string count_text(int64_t n);
// "0, 1, 3" (at most `limit` shown, then "... (N ranks)").
std::string rank_list(const std::vector<int>& ranks);

// ---- argument checks shared by the backends (throw plrt::plugin::Failure) ----------------------
// `where` starts each message, e.g. "gloo allreduce".
void check_tensor_arg(const PL_Tensor* t, const std::string& where, const char* what, PL_DeviceType device_type,
                      const char* device_rule);
void check_reduce_op(PL_ReduceOp op, const std::string& where);
// A rank argument (root, dst, src) in [0, world); `self` is refused when `not_self`.
void check_rank_arg(int64_t value, const std::string& where, const char* what, int world, int self, bool not_self);
void check_same_dtype(const PL_Tensor& a, const PL_Tensor& b, const std::string& where, const char* what_a,
                      const char* what_b);

}  // namespace plrt::pg
