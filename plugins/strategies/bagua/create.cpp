// create: the options, the bucket communication of the algorithm, and ddp's core built over it
// (config checks, the device, the process group, the reducer).
#include "bagua_strategy.hpp"
#include "config_checks.hpp"

namespace plrt::bagua {

std::unique_ptr<BaguaStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* c) {
  strategy::check_config_basics(who, c);
  auto s = std::make_unique<BaguaStrategy>();
  s->host = host;
  s->who = who;
  s->opts = parse_options(who, c->options);
  ddp::CoreSpec spec;
  spec.opts = s->opts.ddp;
  s->comm = std::make_unique<reducer::Allreduce>(s->opts.average ? PL_REDUCE_AVG : PL_REDUCE_SUM);
  spec.comm = s->comm.get();
  s->core = ddp::create_strategy(who, host, c, spec);
  plugin::logf(host, PL_LOG_DEBUG, who, "algorithm %s: gradients %s over the ranks in buckets of %.3g MiB",
               algorithm_name(s->opts.algorithm), s->opts.average ? "averaged" : "summed", s->opts.ddp.bucket_cap_mb);
  return s;
}

BaguaStrategy::~BaguaStrategy() {
  core.reset();  // its reducer borrows comm
}

}  // namespace plrt::bagua
