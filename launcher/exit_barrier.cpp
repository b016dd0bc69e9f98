#include "exit_barrier.hpp"

#include <poll.h>

#include <cerrno>
#include <iostream>

namespace plrt::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `ms` for a stop signal; returns it, or 0.
int wait_for_signal(SignalChannel& signals, int ms) {
  pollfd p{signals.fd(), POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, ms);
  while (n < 0 && errno == EINTR);
  return n > 0 ? signals.take() : 0;
}

}  // namespace

int exit_barrier_serve(const pl::Store& store, int num_nodes, SignalChannel& signals,
                       std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  try {
    int64_t done = store.add(kExitBarrierKey, 1);
    bool told = false;
    while (done < num_nodes) {
      if (!told) {
        std::cerr << "plrun: this node's workers are done; serving the store until the other nodes' are too (at "
                     "most "
                  << timeout.count() / 1000.0 << " s)\n";
        told = true;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) {
        std::cerr << "plrun: warning: " << done << " of " << num_nodes << " nodes reported done within "
                  << timeout.count() / 1000.0 << " s (--exit-barrier-timeout); stopping the store anyway\n";
        return 0;
      }
      if (int sig = wait_for_signal(signals, static_cast<int>(std::min<long long>(left, 100)))) return 128 + sig;
      done = store.add(kExitBarrierKey, 0);
    }
  } catch (const pl::Error& e) {  // the workers succeeded: a store problem now is not the job's failure
    std::cerr << "plrun: warning: the exit barrier failed: " << e.what() << "\n";
  }
  return 0;
}

int exit_barrier_report(const pl::Runtime& runtime, const Rendezvous& rdv, SignalChannel& signals,
                        std::chrono::milliseconds timeout) {
  try {
    pl::StoreOptions so;
    so.host = rdv.master_addr;
    so.port = rdv.master_port;
    so.token = rdv.token;
    so.timeout = timeout;
    pl::Store store(runtime, so);
    store.add(kExitBarrierKey, 1);
  } catch (const pl::Error& e) {
    std::cerr << "plrun: warning: could not tell node 0 that this node is done: " << e.what() << "\n";
  }
  if (int sig = signals.take()) return 128 + sig;
  return 0;
}

}  // namespace plrt::launcher
