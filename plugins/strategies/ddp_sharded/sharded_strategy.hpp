// The state of one ddp_sharded (or ddp_sharded_spawn) instance: ddp's core (the start-up and
// buffer broadcasts, the metrics group, the reducer over the gradient buckets) with the bucket
// communication of its stage, and the shard this rank owns.
//
// Files: create.cpp (options, launch_info, the instance), setup.cpp (the shard plan, owned ranges,
// statistics), optimizer_step.cpp (the host's optimizer on the shard, then the bucketed allgather
// of the updated parameters), entries.cpp (the C table).  The arithmetic of the shards is
// shard_plan.hpp; stage 2's reduce-scatter is reduce_scatter_comm.hpp.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "reduce_scatter_comm.hpp"
#include "sharded_options.hpp"
#include "strategy.hpp"  // ddp's core (../ddp)

namespace plrt::ddp_sharded {

// A bucket's parameter allgather: the rank's own value pieces (packed into its chunk) and every
// member's whole value (unpacked from the gathered buffer).  A bucket of one parameter is gathered
// in place, in the parameter itself (`direct`: its chunks are the outputs, this rank's own chunk the
// input; nothing packed or unpacked): on a wide model the largest layers are buckets by themselves.
struct GatherPlan {
  bool direct = false;
  std::vector<PL_Tensor> own;
  std::vector<int64_t> own_offsets;
  std::vector<PL_Tensor> values;   // every member's value
  std::vector<int64_t> offsets;    // where each lies in the flat buffer
  std::vector<PL_Tensor> outputs;  // chunk q of the flat buffer (direct: of the parameter), q = 0..W-1
  int64_t chunk = 0;
  std::string what, what_pack, what_unpack;  // messages, made once at setup
};

struct ShardedStats {
  uint64_t optimizer_steps = 0;
  double allgather_ms = 0;  // the parameter allgathers, all steps together
};

struct ShardedStrategy {
  ShardedStrategy() = default;
  ~ShardedStrategy();
  ShardedStrategy(const ShardedStrategy&) = delete;
  ShardedStrategy& operator=(const ShardedStrategy&) = delete;

  const PL_Host* host = nullptr;
  std::string who;  // "ddp_sharded" or "ddp_sharded_spawn": begins every message
  ShardedOptions opts;
  int rank = 0, world = 1;
  // The bucket communication is declared before the core, whose reducer borrows it.
  std::unique_ptr<reducer::BucketComm> comm;  // stage 1: allreduce of the mean; stage 2: reduce-scatter
  std::unique_ptr<ddp::DdpStrategy> core;

  // From setup until teardown (under core->m).
  std::vector<PL_ParamRange> owned;  // this rank's ranges (setup's indices), in bucket order
  std::vector<GatherPlan> gathers;   // one per bucket, empty when the job has one rank
  size_t owned_bytes = 0;            // the owned elements' bytes
  size_t trainable_bytes = 0;        // every trainable parameter's bytes
  size_t param_bytes = 0;            // every parameter's value bytes (trainable and frozen)
  ShardedStats stats;
};

// create.cpp
std::unique_ptr<ShardedStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* config);

// setup.cpp
void setup(ShardedStrategy& s, PL_Parameter* params, size_t num_params);
void teardown(ShardedStrategy& s);

// optimizer_step.cpp
void optimizer_step(ShardedStrategy& s, const PL_OptimizerFn* fn);

}  // namespace plrt::ddp_sharded
