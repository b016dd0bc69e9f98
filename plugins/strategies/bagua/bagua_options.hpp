// The options of the bagua strategy (docs/bagua.md; PL_StrategyConfig.options: an alias's presets,
// then the user's, a later entry overriding an earlier one):
//   algorithm               gradient_allreduce (default), bytegrad, decentralized,
//                           low_precision_decentralized, async, qadam; one not built yet is an
//                           error that lists those that are
//   bucket_size_mb          bucket size in MiB, default 10 (every bucket, the first included)
//   hierarchical            true|false; default true on several nodes, false on one (hierarchy.hpp:
//                           reduce inside the node, the algorithm among the nodes' leaders,
//                           broadcast inside the node; on one node it changes nothing)
//   average                 true|false, default true (gradient_allreduce, bytegrad: the mean;
//                           false: the sum)
//   communication_interval  optimizer steps between two exchanges, >= 1, default 1
//                           (decentralized, low_precision_decentralized)
//   peer_selection_mode     all (default) | shift_one (decentralized; shift_one needs an even
//                           world size, or an even number of nodes when hierarchical, checked
//                           at create)
//   sync_interval_ms        async: milliseconds between two rounds, 1..86400000, default 500
//   warmup_steps            async: optimizer steps run as gradient_allreduce first, >= 0, default 0
//   pg.<name>               passed to the process group as <name>
// An option that does not apply to the chosen algorithm is an error naming the algorithms it
// applies to.
#pragma once

#include <plrt/pl_abi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddp_options.hpp"

namespace plrt::bagua {

enum class AlgorithmId {
  kGradientAllreduce,
  kByteGrad,
  kDecentralized,
  kLowPrecisionDecentralized,
  kAsync,
  kQAdam,
};

const char* algorithm_name(AlgorithmId a);

enum class PeerSelection {
  kAll,
  kShiftOne
};

struct BaguaOptions {
  AlgorithmId algorithm = AlgorithmId::kGradientAllreduce;
  bool average = true;
  int hierarchical = -1;  // the option: -1 not given (true on several nodes), 0 false, 1 true
  int64_t communication_interval = 1;
  PeerSelection peer_selection = PeerSelection::kAll;
  int64_t sync_interval_ms = 500;
  int64_t warmup_steps = 0;
  double bucket_size_mb = 10.0;
  ddp::DdpOptions ddp;  // the buckets (both caps = bucket_size_mb) and pg.<name>
};

// Throws plugin::Failure naming an unknown option or algorithm (listing the valid ones), a bad
// value, or an option that does not apply to the algorithm.  `who` begins every message.
BaguaOptions parse_options(const std::string& who, const PL_OptionList& list);

// The world-size rules of the options (shift_one: even); throws naming the option and the size.
// `peers`: the ranks the algorithm runs among (the job's, or hierarchical: the nodes).
void check_world(const std::string& who, const BaguaOptions& o, int32_t peers, bool hierarchical);

}  // namespace plrt::bagua
