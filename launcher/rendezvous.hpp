// The rendezvous of an elastic job (--num-nodes MIN:MAX), as torchrun's c10d rendezvous does it, in
// node 0's store: node 0 (the store's host) opens each round; every plrun that wants to take part
// joins it (an ADD: the join order is the node rank); node 0 closes it once MAX nodes joined, or
// once MIN joined and --rdzv-last-call seconds passed without a new one (sooner when every node
// expected back after a restart is back).  A node that comes after a round closed asks the running
// round to end, if it has room (job_rounds: a "join", not a failure), and joins the next one.
//
// STORE KEYS (V = "plrun/rdzv/<r>"): plrun/rdzv/current (the open round), V/joined (counter),
// V/id/<i> (who joined i-th), V/closed (how many nodes the round has), V/expected (the nodes
// expected back, set when round r-1 ended), V/hb/<i> (node i's heartbeat counter, job_rounds).
#pragma once

#include <chrono>
#include <optional>
#include <plrt/sdk/store.hpp>
#include <string>
#include <vector>

#include "signal_channel.hpp"

namespace plrt::launcher {

// How often a node looks again at a store key or counter it waits on (rendezvous and rounds).
inline constexpr std::chrono::milliseconds kPoll{50};
// One line of plrun's own on stderr ("plrun: <line>"), from the rendezvous and the rounds.
void plrun_line(const std::string& line);

struct ElasticOptions {
  bool host = false;  // this plrun serves the store (node 0)
  int min_nodes = 1, max_nodes = 1;
  std::chrono::milliseconds last_call{30'000};
  std::chrono::milliseconds timeout{600'000};  // how long a round may take to gather MIN nodes
  std::string id;                              // how this node is named in messages: host:pid
};

struct Membership {
  int round = 0;
  int node_rank = 0;
  int num_nodes = 1;
  std::vector<std::string> ids;  // every member's id, by node rank
};

std::string rdzv_key(int round, const std::string& name);

class ElasticRendezvous {
 public:
  ElasticRendezvous(const pl::Store& store, ElasticOptions options) : store_(store), o_(std::move(options)) {}

  // Takes part in round `round` (or the newest one open, if later): returns this node's place once
  // the round closed with it, or nullopt when a stop signal came first (*signal set).  Throws
  // pl::Error when MIN nodes do not gather within the timeout, or the store is lost.
  std::optional<Membership> join(int round, SignalChannel& signals, int* signal);

 private:
  std::optional<Membership> join_round(int round, SignalChannel& signals, int* signal);
  int close(int round, SignalChannel& signals, int* signal);
  std::optional<int> wait_int(const std::string& key, SignalChannel& signals, int* signal);

  const pl::Store& store_;
  ElasticOptions o_;
};

}  // namespace plrt::launcher
