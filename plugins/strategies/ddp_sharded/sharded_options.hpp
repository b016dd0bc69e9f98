// The options of the ddp_sharded strategies: ddp's (bucket_cap_mb, first_bucket_cap_mb,
// broadcast_buffers, pg.<name>; see ../ddp/ddp_options.hpp) and
//   stage   1 or 2, default 2 (ZeRO's stages; Lightning's ddp_sharded is fairscale's stage 2):
//           1: gradients are allreduced whole (every rank keeps the full averaged gradient in its
//              own bucket buffers), each rank steps its shard;
//           2: gradients are reduce-scattered (each rank receives only its shard's average) through
//              two shared bucket buffers instead of one buffer per bucket.
//   Both keep optimizer state for the rank's shard only and allgather the updated parameters.
#pragma once

#include <plrt/pl_abi.h>

#include <string>

#include "ddp_options.hpp"

namespace plrt::ddp_sharded {

struct ShardedOptions {
  int stage = 2;
  ddp::DdpOptions ddp;
};

// Throws plugin::Failure naming an unknown option (listing the valid ones) or a bad value.
ShardedOptions parse_options(const std::string& who, const PL_OptionList& list);

}  // namespace plrt::ddp_sharded
