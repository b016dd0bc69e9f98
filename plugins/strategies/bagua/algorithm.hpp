// One of docs/bagua.md's algorithms: what it adds to ddp's core (the start-up broadcast, the
// metrics group, the reducer over the gradient buckets) around one training step.  The C entries
// (entries.cpp) call these on the instance's algorithm; each algorithm is a file of its own.
//
//   gradient_allreduce.cpp  the buckets' allreduce (mean, or sum)
//   bytegrad.cpp            the buckets' uint8-compressed reduce-scatter and allgather
//   qadam.cpp               QAdam's first moment averaged with bytegrad's compression
//   decentralized.cpp       the weights averaged (all ranks, or one peer) before the optimizer step
//   low_precision_decentralized.cpp  a ring exchanging uint8-compressed weight differences
//   async.cpp               the weights averaged by a background thread (warmup: gradient_allreduce)
//
// Gradient algorithms give the reducer their BucketComm; the algorithms that exchange weights
// instead keep the gradients local (local_gradients(): one bucket per parameter, worked in place,
// nothing communicated) and communicate in before_ or after_optimizer_step on the core's group,
// which no bucket collective uses at that point of the step.
//
// HIERARCHICAL (hierarchy.hpp).  An algorithm runs among its Scope: every rank on the core's group,
// or the nodes' leaders on their group.  create.cpp wraps a gradient algorithm's BucketComm (made
// for the scope) with the node's reduction and broadcast; the weight algorithms reduce and
// broadcast inside the node themselves, around their exchange among the leaders.
#pragma once

#include <plrt/pl_strategy.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bagua_options.hpp"
#include "bucket_comm.hpp"
#include "strategy.hpp"  // ddp's core (../ddp)

namespace plrt::bagua {

struct BaguaStrategy;
using StatList = std::vector<std::pair<std::string, double>>;

// Whom an algorithm's communication runs among: every rank (flat), or the nodes' leaders
// (hierarchical: world = the nodes, rank = this node; only the leaders communicate).
struct Scope {
  int32_t world = 1, rank = 0;
  const strategy::Group* group = nullptr;  // borrowed (the instance's Hierarchy owns it); NULL: the core's
  // The group its collectives run on.
  const strategy::Group& on(const ddp::DdpStrategy& c) const { return group != nullptr ? *group : c.group; }
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // The gradient buckets' communication (the reducer borrows it until teardown).  NULL: the
  // gradients stay local (LocalGradients below).
  virtual std::unique_ptr<reducer::BucketComm> bucket_comm() = 0;
  // Process-group entries it uses beyond ddp's (for the error that lists what a backend lacks).
  virtual std::vector<std::string> needs() const { return {}; }
  // After ddp's setup (parameters registered, rank 0's values broadcast).
  virtual void setup(BaguaStrategy& s);
  // Forward and backward (default: ddp's run_step).
  virtual void run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn);
  virtual void before_optimizer_step(BaguaStrategy& s);
  // The host's optimizer (ABI 1.6), before the first step; default: any optimizer, nothing asked.
  virtual void bind_optimizer(BaguaStrategy& s, PL_OptimizerInfo& info);
  // The loss scaler's verdict (16-mixed): true skips this rank's step.  Default: ddp's (the
  // maximum over the ranks: every rank skips or steps together).
  virtual bool agree_skip(BaguaStrategy& s, bool found_inf);
  // Default: ddp's (every trainable parameter whole).
  virtual void optimizer_step(BaguaStrategy& s, const PL_OptimizerFn* fn);
  virtual void after_optimizer_step(BaguaStrategy& s);
  // ABI 1.6: every rank's weights equal now, and unchanged until the next run_step (a collective,
  // between steps).  Default: nothing (the algorithm keeps them equal, or does not promise it).
  virtual void sync_weights(BaguaStrategy& s);
  // Before ddp's teardown: stops whatever the algorithm runs (bounded); never throws.
  virtual void teardown(BaguaStrategy& s) noexcept;
  // Checkpoints: state of the algorithm's own, per rank (save_state writes only
  // "strategy.bagua.rank<r>.*" files).  Default: none.
  virtual bool has_state() const { return false; }
  // Whether each rank's optimizer state is its own (gradients not averaged): the host then
  // checkpoints it per rank (ABI 1.6 PL_StrategyStateInfo.local_optimizer_state).
  virtual bool local_optimizer_state() const { return false; }
  virtual void save_state(BaguaStrategy& s, const std::string& dir);
  virtual void load_state(BaguaStrategy& s, const std::string& dir, int32_t saved_world);
  // What one synced step puts on the wire from this rank's point of view (get_stat
  // "bytes_per_step"); default: the gradient buckets' bytes.
  virtual double bytes_per_step(const BaguaStrategy& s) const;
  // Statistics of its own, added to get_stat's.
  virtual void add_stats(const BaguaStrategy& s, StatList& out) const;
};

// algorithm.cpp: the instance's algorithm, by opts.algorithm.
// `config`: the process's place in the job (borrowed for the call); `scope`: whom it runs among.
std::unique_ptr<Algorithm> make_algorithm(const BaguaOptions& opts, const PL_StrategyConfig& config,
                                          const Scope& scope);

// The algorithms, one file each.
std::unique_ptr<Algorithm> make_gradient_allreduce(const BaguaOptions& opts, const PL_StrategyConfig& config,
                                                   const Scope& scope);
std::unique_ptr<Algorithm> make_bytegrad(const BaguaOptions& opts, const PL_StrategyConfig& config, const Scope& scope);
std::unique_ptr<Algorithm> make_qadam(const BaguaOptions& opts, const PL_StrategyConfig& config, const Scope& scope);

// bytegrad.cpp: bytegrad's bucket communication among the scope (qadam compresses its first
// moment with it).
std::unique_ptr<reducer::BucketComm> make_bytegrad_comm(const Scope& scope, bool average);
// The encoded size of one step's gradient under bytegrad's compression: every bucket's n chunks
// (u8_codec.hpp); 0 alone.
double bytegrad_encoded_bytes(const BaguaStrategy& s, int world);
std::unique_ptr<Algorithm> make_decentralized(const BaguaOptions& opts, const PL_StrategyConfig& config,
                                              const Scope& scope);
std::unique_ptr<Algorithm> make_low_precision_decentralized(const BaguaOptions& opts, const PL_StrategyConfig& config,
                                                            const Scope& scope);
std::unique_ptr<Algorithm> make_async(const BaguaOptions& opts, const PL_StrategyConfig& config, const Scope& scope);

// The bucket communication of the algorithms that keep gradients local: buckets of one parameter
// each, worked in place in the gradient (no flat buffer, no copy), nothing issued.
class LocalGradients final : public reducer::BucketComm {
 public:
  std::string name() const override { return "local gradient (nothing communicated)"; }
  bool in_place(const reducer::Bucket&) const override { return true; }
  PL_Work* start(reducer::Reducer&, reducer::Bucket&) override { return nullptr; }
  void finish(reducer::Reducer&, reducer::Bucket&) override {}
};

}  // namespace plrt::bagua
