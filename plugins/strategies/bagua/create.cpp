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
  Scope scope{c->world_size, c->global_rank, nullptr};
  if (const auto layout = hierarchical_layout(s->opts, *c)) {
    s->hier.plan(*layout);
    scope = Scope{layout->nodes, layout->node, &s->hier.leaders()};
  }
  check_world(who, s->opts, scope.world, static_cast<bool>(s->hier));
  s->algo = make_algorithm(s->opts, *c, scope);
  ddp::CoreSpec spec;
  spec.opts = s->opts.ddp;
  s->comm = s->algo->bucket_comm();
  if (s->comm && s->hier)  // the node's reduction and broadcast around the leaders' stages
    s->comm = make_hierarchical_comm(s->hier, std::move(s->comm), s->opts.average ? PL_REDUCE_AVG : PL_REDUCE_SUM);
  if (!s->comm) {  // gradients stay local: one bucket per parameter, worked in place
    s->comm = std::make_unique<LocalGradients>();
    spec.opts.bucket_cap_mb = spec.opts.first_bucket_cap_mb = 1.0 / (1024.0 * 1024.0);
  }
  spec.comm = s->comm.get();
  spec.extra_needs = s->algo->needs();
  s->core = ddp::create_strategy(who, host, c, spec);
  plugin::logf(host, PL_LOG_DEBUG, who, "algorithm %s, buckets of %.3g MiB, %s", algorithm_name(s->opts.algorithm),
               s->opts.bucket_size_mb,
               s->hier ? ("hierarchical (" + std::to_string(c->num_nodes) + " nodes of " +
                          std::to_string(c->local_world_size) + " processes)")
                             .c_str()
                       : "flat");
  return s;
}

BaguaStrategy::~BaguaStrategy() {
  core.reset();  // its reducer borrows comm
}

}  // namespace plrt::bagua
