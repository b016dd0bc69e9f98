// What the two algorithms that exchange weights (decentralized, low_precision_decentralized;
// docs/bagua.md §3, §4) share as Algorithms: the gradients stay local; an exchange every
// communication_interval optimizer steps (steps 0, I, 2I, ... of the hook that counts them); the
// exchange counter and time (get_stat "exchanges", "weight_comm_ms"); per-rank checkpoints of this
// rank's values, its counters and whatever the algorithm adds (rank_state.hpp), the values put back
// at the next run_step; each rank's optimizer state its own (local_optimizer_state).
//
// Hierarchical (hierarchy.hpp): the exchange runs among the scope, the nodes' leaders; each
// algorithm averages the values inside the node before it and broadcasts the leader's after it.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "algorithm.hpp"
#include "weight_buckets.hpp"

namespace plrt::bagua {

class WeightAlgorithm : public Algorithm {
 public:
  // world, rank: the job's (state files); scope: whom the exchange runs among.
  WeightAlgorithm(const char* name, int64_t interval, int32_t world, int32_t rank, const Scope& scope)
      : name_(name), interval_(interval), world_(world), rank_(rank), scope_(scope) {}

  std::unique_ptr<reducer::BucketComm> bucket_comm() final { return nullptr; }
  // Resets the counters and what a load left pending, then make_buffers.
  void setup(BaguaStrategy& s) final;
  void run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn) final;
  // Frees the buffers while the core's device context, which they point to, still lives (the
  // core goes before the algorithm).
  void teardown(BaguaStrategy& s) noexcept final;
  bool has_state() const final { return true; }
  bool local_optimizer_state() const final { return true; }  // gradients stay local
  void save_state(BaguaStrategy& s, const std::string& dir) final;
  void load_state(BaguaStrategy& s, const std::string& dir, int32_t saved_world) final;
  double bytes_per_step(const BaguaStrategy& s) const final;
  void add_stats(const BaguaStrategy& s, StatList& out) const final;

 protected:
  // Counts a step; true when it exchanges (the interval says so and there is a group).
  bool exchange_due(const ddp::DdpStrategy& c) { return steps_++ % interval_ == 0 && static_cast<bool>(c.group); }
  // An exchange that began at t0 is done.
  void exchanged(std::chrono::steady_clock::time_point t0) {
    ++exchanges_;
    comm_ms_ += ms_since(t0);
  }
  // setup's part of the algorithm: its checks and buffers; sets bytes_ (what one exchange sends).
  virtual void make_buffers(BaguaStrategy& s) = 0;
  virtual void free_buffers() noexcept = 0;
  // Checkpoint entries of its own beyond the values and counters.  load_extra checks them all and
  // returns the change that puts them in place, run only once every check of the load passed.
  virtual void save_extra(const ddp::DdpStrategy& c, RankState& st) const {
    (void)c;
    (void)st;
  }
  virtual std::function<void()> load_extra(const ddp::DdpStrategy& c, const RankState& st, const std::string& file) {
    (void)c;
    (void)st;
    (void)file;
    return {};
  }

  const char* name_;  // the algorithm, in state files
  int64_t interval_;
  int32_t world_, rank_;   // in the job
  Scope scope_;            // the exchange's ranks
  int64_t exchanges_ = 0;  // exchanges done
  double bytes_ = 0;

 private:
  int64_t steps_ = 0;  // steps counted since setup (or as loaded)
  double comm_ms_ = 0;
  PendingValues pending_;
};

}  // namespace plrt::bagua
