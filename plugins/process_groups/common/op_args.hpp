// What every backend does before it hands an op to the core: check the caller's arguments and
// build the op's descriptor; and, at create, check the config and read the shared options.  The
// backend supplies only its device rule (gloo: CPU buffers; nccl: CUDA buffers on its device).
// Every check throws plugin::Failure with a message that starts with `where` ("gloo allgather").
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "group_core.hpp"
#include "op_desc.hpp"

namespace plrt::pg {

// Checks one tensor argument (`what` names it: "tensor", "outputs[2]") against the backend's rule.
using TensorCheck = std::function<void(const PL_Tensor* t, const char* what)>;

struct GroupShape {
  int rank = 0;
  int world = 1;
};

OpDesc allreduce_args(const PL_Tensor* tensor, PL_ReduceOp op, const std::string& where, const TensorCheck& check);
OpDesc broadcast_args(const PL_Tensor* tensor, int32_t root, GroupShape g, const std::string& where,
                      const TensorCheck& check);
// outputs[r] receives rank r's input; outputs[rank] must have the input's size.
OpDesc allgather_args(const PL_Tensor* input, const PL_Tensor* outputs, size_t num_outputs, GroupShape g,
                      const std::string& where, const TensorCheck& check);
// output = the reduction of every rank's inputs[rank]; output must have inputs[rank]'s size.
OpDesc reduce_scatter_args(const PL_Tensor* inputs, size_t num_inputs, const PL_Tensor* output, PL_ReduceOp op,
                           GroupShape g, const std::string& where, const TensorCheck& check);
// all_to_all: chunk j of `input` (input_counts[j] elements) goes to rank j, chunk i of `output`
// comes from rank i; NULL counts: equal chunks.  Checks everything one rank can check alone (the
// tensors, one dtype and device, no overlap, counts >= 0 summing to numel, equal chunks dividing
// exactly, and input_counts[rank] == output_counts[rank]); the peers' agreement is checked with
// check_peer_counts once the counts have been exchanged.
OpDesc all_to_all_args(const PL_Tensor* input, const int64_t* input_counts, const PL_Tensor* output,
                       const int64_t* output_counts, GroupShape g, const std::string& where, const TensorCheck& check);
// What a rank contributes to the exchange of all_to_all counts: its input_counts then its
// output_counts (2 * world entries).
std::vector<int64_t> peer_count_row(const OpDesc& d);
// `table` holds every rank's peer_count_row, rank by rank (2 * world * world entries).  Throws
// AgreedFailure naming the first pair (in rank order) where rank i's input_counts[j] differs from
// rank j's output_counts[i]: every rank computes it from the same table, so every rank reports
// the same error and leaves the op at the same point.
void check_peer_counts(const std::vector<int64_t>& table, int world);

// send (is_send) to `peer` or recv from it.
OpDesc p2p_args(bool is_send, const PL_Tensor* tensor, int32_t peer, int32_t tag, GroupShape g,
                const std::string& where, const TensorCheck& check);

// ---- create ----
// The config checks every backend shares: struct size, world size, rank, store, the host's store API.
void check_group_config(const std::string& backend, const PL_Host* host, const PL_ProcessGroupConfig* c);
// The options as key -> value; an unknown key is an error listing `valid` (which always includes
// probe_ms, read by core_config).
std::map<std::string, std::string> parse_options(const std::string& backend, const PL_OptionList& list,
                                                 std::vector<std::string> valid);
// The core's config from the group's config and the options (probe_ms, default 1000).
CoreConfig core_config(const std::string& backend, const PL_Host* host, const PL_ProcessGroupConfig& c,
                       const std::map<std::string, std::string>& options);

}  // namespace plrt::pg
