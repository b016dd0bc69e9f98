// The nodes of a multi-node job leave together, as torchrun's agents do (its exit barrier): node 0
// serves the store, and its workers may end before other nodes' workers have made their last use
// of it, so node 0's plrun keeps serving until every node's plrun has said that its workers ended
// well, or until a timeout.  Only after local success: a failed node stops at once.
#pragma once

#include <chrono>
#include <plrt/sdk/store.hpp>

#include "supervisor.hpp"

namespace plrt::launcher {

constexpr const char* kExitBarrierKey = "plrun/nodes_done";

// Node 0: counts itself done, then waits until all `num_nodes` are (at most `timeout`; a signal
// ends the wait: it returns 128 + signal).  Returns 0 otherwise; a timeout is a warning only (the
// workers of this node did succeed).
int exit_barrier_serve(const pl::Store& store, int num_nodes, SignalChannel& signals,
                       std::chrono::milliseconds timeout);

// Another node: tells node 0's store that this node is done.  A store that cannot be reached
// within `timeout` is a warning (node 0 may have timed out already); returns 0, or 128 + signal
// for a signal that came meanwhile.
int exit_barrier_report(const pl::Runtime& runtime, const Rendezvous& rdv, SignalChannel& signals,
                        std::chrono::milliseconds timeout);

}  // namespace plrt::launcher
