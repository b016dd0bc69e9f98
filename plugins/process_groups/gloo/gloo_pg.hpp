// The gloo process-group plugin's shared declarations: the instance, the collectives' entry
// points (one file each, in Gloo's habit), and the helpers they share.  The backend-independent
// part (sequence numbers, worker thread, watchdog, mismatch and timeout diagnosis, reductions) is
// plrt_pg_core in ../common.  A group made for a device stages its tensors through host memory
// (staging.hpp).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "group_core.hpp"
#include "op_args.hpp"
#include "op_desc.hpp"
#include "pg_entry.hpp"
#include "plugin_support.hpp"
#include "staging.hpp"

struct PL_ProcessGroup {
  static constexpr const char* kBackend = "gloo";  // names it in pg::entry's messages
  const PL_Host* host = nullptr;                   // borrowed; outlives the instance
  int rank = 0;
  int world = 1;
  std::string name;
  std::string address;  // what the transport listens on, for messages
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::Context> context;  // null for a world of one rank (no transport)
  std::unique_ptr<plrt::pg::GroupCore> core;
  // Option allreduce: ring, bcube (halving-doubling), or auto: plrt::gloo_pg::use_bcube decides.
  enum class Algorithm : uint8_t {
    kRing,
    kBcube,
    kAuto
  } allreduce = Algorithm::kAuto;
  std::shared_ptr<plrt::gloo_pg::Staging> staging;  // null for a group made for the cpu
};

namespace plrt::gloo_pg {

inline constexpr const char* kBackend = "gloo";

// Slot prefixes (the top byte of a gloo slot) of the ops this plugin runs over unbound buffers;
// gloo's own collectives use 0x01..0x08.
inline constexpr uint64_t kP2PSlotPrefix = 0x10;
inline constexpr uint64_t kReduceScatterSlotPrefix = 0x11;

// ---- entry points (process_group.cpp builds the table) ----
PL_Error* allreduce(PL_ProcessGroup* pg, PL_Tensor* tensor, PL_ReduceOp op, PL_Work** out) noexcept;
PL_Error* broadcast(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t root, PL_Work** out) noexcept;
PL_Error* allgather(PL_ProcessGroup* pg, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs,
                    PL_Work** out) noexcept;
PL_Error* reduce_scatter(PL_ProcessGroup* pg, const PL_Tensor* inputs, size_t num_inputs, PL_Tensor* output,
                         PL_ReduceOp op, PL_Work** out) noexcept;
PL_Error* barrier(PL_ProcessGroup* pg, PL_Work** out) noexcept;
PL_Error* all_to_all(PL_ProcessGroup* pg, const PL_Tensor* input, const int64_t* input_counts, PL_Tensor* output,
                     const int64_t* output_counts, PL_Work** out) noexcept;
PL_Error* send(PL_ProcessGroup* pg, const PL_Tensor* tensor, int32_t dst, int32_t tag, PL_Work** out) noexcept;
PL_Error* recv(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t src, int32_t tag, PL_Work** out) noexcept;

// ---- allreduce.cpp ----
// auto: bcube for a power-of-two world below kAutoRingFromBytes, ring otherwise (measurements in
// allreduce.cpp).  bench/allreduce_bench.cpp mirrors this rule for its direct Gloo side.
inline constexpr size_t kAutoRingFromBytes = size_t{128} << 20;
bool use_bcube(PL_ProcessGroup::Algorithm algorithm, int world, size_t bytes);

// ---- transport.cpp ----
// Wakes every pending operation on every pair of `context` with `reason` and closes the sockets
// (tcp Pair::signalExceptionExternal), so that the peers see the connection closed too.
void abort_pairs(gloo::Context& context, const std::string& reason);
// A barrier with the op's tag: what an op that moves no data still does, so that every rank
// still meets every other at this sequence number (missing ranks and mismatches are caught).
void tagged_barrier(const std::shared_ptr<gloo::Context>& context, const pg::OpContext& oc);

// ---- an op's gloo buffers against abort_pairs ----
// Gloo's tcp pairs reach an op's UnboundBuffers through weak pointers that do not keep them alive,
// so abort_pairs (on the watchdog's thread) could signal a buffer that the op's thread is
// destroying after its op already failed another way (TSan showed pthread_cond_broadcast in
// UnboundBuffer::signalException racing pthread_cond_destroy in ~UnboundBuffer).  So every object
// owning UnboundBuffers (gloo's *Options, the buffers plrt makes itself) is destroyed under
// buffers_mutex(), which abort_pairs holds while it signals.  Neither side waits for anything else
// while holding it (both then take gloo's pair and buffer locks in that order), and a destruction
// takes it uncontended unless an abort is under way: a few tens of nanoseconds per op.
std::mutex& buffers_mutex();

// A T (a gloo *Options) destroyed under buffers_mutex().
template <class T>
class Guarded {
 public:
  template <class... A>
  explicit Guarded(A&&... a) {
    v_.emplace(std::forward<A>(a)...);
  }
  ~Guarded() {
    std::lock_guard<std::mutex> lock(buffers_mutex());
    v_.reset();
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  T* operator->() { return &*v_; }
  T& operator*() { return *v_; }

 private:
  std::optional<T> v_;
};

struct LockedBufferDelete {
  void operator()(gloo::transport::UnboundBuffer* b) const {
    std::lock_guard<std::mutex> lock(buffers_mutex());
    delete b;
  }
};
// An UnboundBuffer destroyed under buffers_mutex().
using OwnedBuffer = std::unique_ptr<gloo::transport::UnboundBuffer, LockedBufferDelete>;
inline OwnedBuffer own(std::unique_ptr<gloo::transport::UnboundBuffer> b) { return OwnedBuffer(b.release()); }

// ---- helpers ----

using pg::entry;
inline std::string where(const char* op) { return pg::where(kBackend, op); }

// Runs gloo code; its exceptions become std::runtime_error without gloo's "[file:line] " prefix.
template <class F>
void gloo_call(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::string m = e.what();
    if (!m.empty() && m[0] == '[') {
      const size_t end = m.find("] ");
      if (end != std::string::npos) m = m.substr(end + 2);
    }
    throw std::runtime_error(m);
  }
}

// Calls f(T{}) with an unsigned type T of `size` bytes: gloo's templates only use sizeof(T).
template <class F>
void with_element(size_t size, F&& f) {
  switch (size) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    default:
      f(uint64_t{});
      break;
  }
}

// The gloo rule for tensor arguments: CPU tensors, and tensors on the device the group stages.
pg::TensorCheck tensor_rule(const PL_ProcessGroup& pg, const std::string& where);
inline pg::GroupShape shape(const PL_ProcessGroup* pg) { return {pg->rank, pg->world}; }

inline size_t bytes_of(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

}  // namespace plrt::gloo_pg
