// The state of one bagua instance (docs/bagua.md): ddp's core (the start-up and buffer broadcasts,
// the metrics group, the reducer over the gradient buckets) and the algorithm (algorithm.hpp) that
// gives the reducer its bucket communication and works around the optimizer step.
//
// Files: bagua_options.* (the options), algorithm.* (the algorithms' interface, the choice by
// option), one file per algorithm, create.cpp (the instance), entries.cpp (the C table: ddp's
// entries through ddp::CoreEntries, the algorithm's hooks, checkpoints, get_stat), bagua.cpp (the
// plugin and its aliases).
#pragma once

#include <memory>
#include <string>

#include "algorithm.hpp"
#include "bagua_options.hpp"
#include "hierarchy.hpp"
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
  // Hierarchical communication (hierarchy.hpp), when it applies: planned at create, its groups
  // connected at setup.  Declared first: the comm and the algorithm borrow its groups, and the
  // core's reducer drains their work before they go.
  Hierarchy hier;
  // Declared before the core: the core's reducer borrows comm, and the algorithm is torn down
  // (teardown) before the core is.
  std::unique_ptr<Algorithm> algo;
  std::unique_ptr<reducer::BucketComm> comm;
  std::unique_ptr<ddp::DdpStrategy> core;
  int64_t optimizer_steps = 0;  // after_optimizer_step calls (skipped steps included)
  int setups = 0;               // setup calls: each names the hierarchy's groups anew
};

// create.cpp
std::unique_ptr<BaguaStrategy> create_strategy(const char* who, const PL_Host* host, const PL_StrategyConfig* config);

}  // namespace plrt::bagua
