// create: the options, the algorithm, its bucket communication, and ddp's core built over it
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
  check_world(who, s->opts, c->world_size);
  s->algo = make_algorithm(s->opts, *c);
  ddp::CoreSpec spec;
  spec.opts = s->opts.ddp;
  s->comm = s->algo->bucket_comm();
  if (!s->comm) {  // gradients stay local: one bucket per parameter, worked in place
    s->comm = std::make_unique<LocalGradients>();
    spec.opts.bucket_cap_mb = spec.opts.first_bucket_cap_mb = 1.0 / (1024.0 * 1024.0);
  }
  spec.comm = s->comm.get();
  spec.extra_needs = s->algo->needs();
  s->core = ddp::create_strategy(who, host, c, spec);
  plugin::logf(host, PL_LOG_DEBUG, who, "algorithm %s, buckets of %.3g MiB", algorithm_name(s->opts.algorithm),
               s->opts.bucket_size_mb);
  return s;
}

BaguaStrategy::~BaguaStrategy() {
  core.reset();  // its reducer borrows comm
}

}  // namespace plrt::bagua
