// The rounds of a job: how the plrun of every node agrees, through node 0's store, on how a round
// of workers ended and what comes next (torchrun's elastic agent, with one job-wide count).
//
// A round is one set of workers on every node.  It ends for the whole job when any node's worker
// fails or any node's plrun is signalled: that node writes the round's end (compare_set: the first
// cause wins) and every node's watcher sees it within a store wait and stops its workers.  The
// node that is first to ask decides, once: a restart while the job-wide restart count
// (`plrun/restarts`, one ADD per failed round, so nodes never count differently and a node that
// rejoins cannot reset it) is within --max-restarts, else the job fails with the failing worker's
// code.  Every node waits until every node's workers are gone before the next round starts, so
// that no new worker meets an old one.  A round in which every worker of every node succeeded ends
// the job; node 0 serves the store until every node has seen that (the exit barrier).
//
// STORE KEYS (plrun's own, next to the workers' "plrt/round_<r>/..." ones; R = "plrun/round/<r>"):
//   R/end       "<failed|signal>|<code>|<text>": why the round ended, set once
//   R/decided   counter: the node that reads 1 decides
//   R/next      "restart|<count>" or "stop|<code>": the decision
//   R/stopped   counter of the nodes whose workers are gone
//   R/done      counter of the nodes whose workers all succeeded
//   R/left      counter of the nodes that saw every node done (node 0 then stops serving)
//   plrun/restarts   the job-wide restart count
// and, for the workers, plrt/round_<r>/PL_STORE_JOB_ENDED_KEY (see pl_store.h) when a worker ends.
#pragma once

#include <atomic>
#include <chrono>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>

#include "rendezvous.hpp"
#include "supervisor.hpp"

namespace plrt::launcher {

using Clock = std::chrono::steady_clock;

struct RoundsOptions {
  int node_rank = 0;
  int num_nodes = 1;
  int max_restarts = 0;
  std::chrono::milliseconds exit_barrier{300'000};  // node 0 serving for the others after success
  std::chrono::milliseconds stop_timeout{15'000};   // how long the nodes wait for each other to stop
  // An elastic job (--num-nodes MIN:MAX): node_rank and num_nodes come from each round's
  // membership; every node sends a heartbeat, node 0 (`host`) watches them; a round that ends
  // because a node joined or left, or with a node missing, is followed by a new rendezvous round
  // that does not count as a restart.
  bool elastic = false;
  bool host = false;
  std::chrono::milliseconds heartbeat{1'000};
};

// What comes after a round.
struct RoundOutcome {
  enum class Next {
    finished,
    restart,
    stop
  } next = Next::finished;
  int code = 0;  // stop: plrun's exit code
};

class JobRounds {
 public:
  // `store`: node 0's store, unprefixed (node 0 serves it).  Starts no thread.
  JobRounds(const pl::Store& store, RoundsOptions options);
  ~JobRounds();
  JobRounds(const JobRounds&) = delete;
  JobRounds& operator=(const JobRounds&) = delete;

  int round() const { return round_; }
  // Elastic: the round this node takes part in, its rank and the node count (rendezvous.hpp).
  void set_membership(const Membership& m);
  int restarts() const { return restarts_; }
  // The prefix of the current round's worker keys (PL_STORE_PREFIX): "plrt/round_<r>/".
  std::string worker_prefix() const;

  // Starts watching the round's end key: stop_fd() becomes readable when another node ended the
  // round (or the store was lost).  Call before supervise_round.
  void begin_round();
  int stop_fd() const { return stop_fd_; }
  // SupervisorOptions::on_event: records a worker's end for the round's workers (their store
  // waits and collectives then fail at once, naming it) and a failure as the round's end.
  void on_worker_event(const WorkerEvent& event, bool stopping);
  // After supervise_round: agrees with the other nodes on what comes next.  Waits are bounded and
  // end on a signal (plrun's exit code then 128 + signal).
  RoundOutcome finish_round(const SuperviseResult& result, SignalChannel& signals);

 private:
  std::string key(const std::string& name) const;
  void stop_watching();
  bool claim_end(const std::string& kind, int code, const std::string& text);
  RoundOutcome after_success(SignalChannel& signals);
  RoundOutcome after_failure(SignalChannel& signals);
  std::string gone_nodes() const;  // the round's nodes that did not report their stop
  void watch(const std::string& end_key);
  void heartbeat(int64_t beat, std::vector<std::pair<std::string, Clock::time_point>>& seen);

  const pl::Store& store_;
  RoundsOptions o_;
  int round_ = 0;
  int restarts_ = 0;
  int stop_fd_ = -1;                     // an eventfd
  std::vector<std::string> member_ids_;  // elastic: every member's id, by node rank
  std::thread watcher_;
  std::atomic<bool> watching_{false};
};

}  // namespace plrt::launcher
