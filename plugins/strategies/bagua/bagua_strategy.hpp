// The state of one bagua instance (docs/bagua.md): ddp's core (the start-up and buffer broadcasts,
// the metrics group, the reducer over the gradient buckets) with the bucket communication of the
// algorithm.  gradient_allreduce is the reducer's Allreduce (AVG, or SUM with average=false).
//
// Files: bagua_options.* (the options), create.cpp (the instance), entries.cpp (the C table:
// ddp's entries through ddp::CoreEntries, get_stat, launch_info), bagua.cpp (the plugin and its
// aliases).
#pragma once

#include <memory>
#include <string>

#include "bagua_options.hpp"
#include "strategy.hpp"  // ddp's core (../ddp)

namespace plrt::bagua {

struct BaguaStrategy {
  BaguaStrategy() = default;
  ~BaguaStrategy();
  BaguaStrategy(const BaguaStrategy&) = delete;
  BaguaStrategy& operator=(const BaguaStrategy&) = delete;

  const PL_Host* host = nullptr;
  std::string who;  // "bagua" (or the alias's plugin name): begins every message
  BaguaOptions opts;
  // The bucket communication is declared before the core, whose reducer borrows it.
  std::unique_ptr<reducer::BucketComm> comm;
  std::unique_ptr<ddp::DdpStrategy> core;
};

// create.cpp
std::unique_ptr<BaguaStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* config);

}  // namespace plrt::bagua
