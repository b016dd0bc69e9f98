// The nccl process-group plugin's shared declarations: the instance and the collectives' entry
// points.  The backend-independent part (sequence numbers, worker thread and PL_Work, watchdog,
// mismatch and timeout diagnosis) is plrt_pg_core in ../common, shared with gloo.
//
// MISMATCH CHECK.  NCCL has no tags, so a mismatched collective could complete with a wrong answer
// instead of blocking.  Every collective therefore carries, in the same ncclGroupStart/End as the
// data, a max-allreduce of two int64 {f, ~f} where f is the 64-bit fingerprint of the sequence
// number and descriptor: all ranks agree exactly when max(f) == f and max(~f) == ~f (~ reverses
// the order).  The 16 bytes come back with the completion; a mismatch fails the op on every rank
// and the core's diagnosis names what each rank called.  A mismatch that makes NCCL block (other
// sizes) is found by the core's probes through the store, as for gloo.  Cost: one 2-element
// allreduce fused into the op's group, and two 16-byte copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "group_core.hpp"
#include "nccl_comm.hpp"
#include "op_args.hpp"
#include "op_desc.hpp"
#include "pg_entry.hpp"
#include "plugin_support.hpp"

struct PL_ProcessGroup {
  static constexpr const char* kBackend = "nccl";  // names it in pg::entry's messages
  const PL_Host* host = nullptr;                   // borrowed; outlives the instance
  int rank = 0;
  int world = 1;
  int device = 0;
  std::string name;
  std::unique_ptr<plrt::nccl::Comm> comm;
  int64_t* fp_device = nullptr;  // 2 int64 on the device: the fingerprint allreduce
  int64_t* fp_host = nullptr;    // 4 int64 pinned: [0..1] sent, [2..3] received
  std::unique_ptr<plrt::pg::GroupCore> core;
};

namespace plrt::nccl {

inline constexpr const char* kBackend = "nccl";
inline constexpr const char* kCudaOnly =
    "the nccl process group takes CUDA buffers on the group's device (gloo takes CPU ones)";

PL_Error* allreduce(PL_ProcessGroup* pg, PL_Tensor* tensor, PL_ReduceOp op, PL_Work** out) noexcept;
PL_Error* broadcast(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t root, PL_Work** out) noexcept;
PL_Error* allgather(PL_ProcessGroup* pg, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs,
                    PL_Work** out) noexcept;
PL_Error* reduce_scatter(PL_ProcessGroup* pg, const PL_Tensor* inputs, size_t num_inputs, PL_Tensor* output,
                         PL_ReduceOp op, PL_Work** out) noexcept;
PL_Error* barrier(PL_ProcessGroup* pg, PL_Work** out) noexcept;
PL_Error* all_to_all(PL_ProcessGroup* pg, const PL_Tensor* input, const int64_t* input_counts, PL_Tensor* output,
                     const int64_t* output_counts, PL_Work** out) noexcept;  // all_to_all.cpp
PL_Error* send(PL_ProcessGroup* pg, const PL_Tensor* tensor, int32_t dst, int32_t tag, PL_Work** out) noexcept;
PL_Error* recv(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t src, int32_t tag, PL_Work** out) noexcept;

using pg::entry;
inline std::string where(const char* op) { return pg::where(kBackend, op); }

// The nccl rule for tensor arguments: CUDA buffers on the group's device.
pg::TensorCheck device_tensors(const PL_ProcessGroup& pg, const std::string& where);
inline pg::GroupShape shape(const PL_ProcessGroup* pg) { return {pg->rank, pg->world}; }

// Runs one collective: the fingerprint in, `ops(comm, stream)` and the fingerprint allreduce in one
// NCCL group, the fingerprint out, then waits for completion and checks the fingerprints.
using NcclOps = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;
void run_collective(PL_ProcessGroup& pg, const pg::OpDesc& desc, const pg::OpContext& oc, const NcclOps& ops);

}  // namespace plrt::nccl
