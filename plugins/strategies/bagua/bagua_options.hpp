// The options of the bagua strategy (docs/bagua.md; PL_StrategyConfig.options: an alias's presets,
// then the user's, a later entry overriding an earlier one):
//   algorithm       gradient_allreduce (default).  The other algorithms of docs/bagua.md are not
//                   built yet; naming one is an error that lists those that are.
//   average         true|false, default true (gradient_allreduce: the mean; false: the sum)
//   bucket_size_mb  gradient bucket size in MiB, default 10 (every bucket, the first included)
//   pg.<name>       passed to the process group as <name>
#pragma once

#include <plrt/pl_abi.h>

#include <string>

#include "ddp_options.hpp"

namespace plrt::bagua {

enum class Algorithm {
  kGradientAllreduce
};

const char* algorithm_name(Algorithm a);

struct BaguaOptions {
  Algorithm algorithm = Algorithm::kGradientAllreduce;
  bool average = true;
  ddp::DdpOptions ddp;  // the buckets (both caps = bucket_size_mb) and pg.<name>
};

// Throws plugin::Failure naming an unknown option or algorithm (listing the valid ones) or a bad
// value.  `who` begins every message.
BaguaOptions parse_options(const std::string& who, const PL_OptionList& list);

}  // namespace plrt::bagua
