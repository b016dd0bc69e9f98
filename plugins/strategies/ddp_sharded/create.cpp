// create: the options (stage and ddp's), the bucket communication of the stage, and ddp's core
// built over it (config checks, the device, the process group, the reducer).
#include "config_checks.hpp"
#include "sharded_strategy.hpp"

namespace plrt::ddp_sharded {

std::unique_ptr<ShardedStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* c) {
  strategy::check_config_basics(who, c);
  auto s = std::make_unique<ShardedStrategy>();
  s->host = host;
  s->who = who;
  s->opts = parse_options(who, c->options);
  s->rank = c->global_rank;
  s->world = c->world_size;
  ddp::CoreSpec spec;
  spec.opts = s->opts.ddp;
  if (s->opts.stage == 2) {
    s->comm = std::make_unique<ReduceScatterMean>(s->rank, s->world);
    spec.extra_needs = {"reduce_scatter", "allgather"};
  } else {
    s->comm = std::make_unique<reducer::Allreduce>();
    spec.extra_needs = {"allgather"};
  }
  spec.comm = s->comm.get();
  s->core = ddp::create_strategy(who, host, c, spec);
  plugin::logf(
      host, PL_LOG_DEBUG, who, "stage %d: %s, optimizer state for this rank's shard only", s->opts.stage,
      s->opts.stage == 2 ? "gradients reduce-scattered through 2 shared bucket buffers" : "gradients allreduced whole");
  return s;
}

ShardedStrategy::~ShardedStrategy() {
  core.reset();  // its reducer borrows comm
}

}  // namespace plrt::ddp_sharded
