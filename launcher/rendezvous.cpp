#include "rendezvous.hpp"

#include <cerrno>
#include <iostream>
#include <thread>

namespace plrt::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

void plrun_line(const std::string& line) { std::cerr << "plrun: " + line + "\n" << std::flush; }

std::string rdzv_key(int round, const std::string& name) { return "plrun/rdzv/" + std::to_string(round) + "/" + name; }

// The integer at `key` once it exists (polled, so that a signal ends the wait), bounded by the
// rendezvous timeout.
std::optional<int> ElasticRendezvous::wait_int(const std::string& key, SignalChannel& signals, int* signal) {
  const auto until = Clock::now() + o_.timeout;
  for (;;) {
    if (store_.check_keys({key})) return std::stoi(store_.get(key));
    if (Clock::now() >= until)
      throw pl::Error(PL_ERR_TIMEOUT, "the elastic rendezvous did not reach '" + key + "' within " +
                                          std::to_string(o_.timeout.count() / 1000) + " s");
    if ((*signal = signals.wait_for(kPoll))) return std::nullopt;
  }
}

int ElasticRendezvous::close(int round, SignalChannel& signals, int* signal) {
  const int expected =
      store_.check_keys({rdzv_key(round, "expected")}) ? std::stoi(store_.get(rdzv_key(round, "expected"))) : 0;
  const auto give_up = Clock::now() + o_.timeout;
  int64_t count = store_.add(rdzv_key(round, "joined"), 0);
  auto last_change = Clock::now();
  for (;;) {
    const int64_t now_count = store_.add(rdzv_key(round, "joined"), 0);
    if (now_count != count) {
      count = now_count;
      last_change = Clock::now();
    }
    int n = 0;
    if (count >= o_.max_nodes)
      n = o_.max_nodes;
    else if (count >= o_.min_nodes &&
             ((expected > 0 && count >= expected) || Clock::now() - last_change >= o_.last_call))
      n = static_cast<int>(count);
    if (n > 0) {
      store_.set(rdzv_key(round, "closed"), std::to_string(n));
      return n;
    }
    if (Clock::now() >= give_up)
      throw pl::Error(PL_ERR_TIMEOUT, "round " + std::to_string(round) + " of the elastic rendezvous has " +
                                          std::to_string(count) + " node(s) after " +
                                          std::to_string(o_.timeout.count() / 1000) +
                                          " s; --num-nodes asks for at least " + std::to_string(o_.min_nodes));
    if ((*signal = signals.wait_for(kPoll))) return 0;
  }
}

std::optional<Membership> ElasticRendezvous::join(int round, SignalChannel& signals, int* signal) {
  try {
    return join_round(round, signals, signal);
  } catch (const pl::Error& e) {
    if (e.code() == PL_ERR_TIMEOUT) throw;
    throw pl::Error(e.code(), std::string("the elastic rendezvous lost node 0's store (the job has ended, or node "
                                          "0's plrun is gone): ") +
                                  e.what());
  }
}

std::optional<Membership> ElasticRendezvous::join_round(int round, SignalChannel& signals, int* signal) {
  *signal = 0;
  for (int r = round;;) {
    if (o_.host) {
      store_.set("plrun/rdzv/current", std::to_string(r));
    } else {
      // The newest open round, once it is at least `r` (node 0 opens it when its workers are gone).
      for (;;) {
        auto cur = wait_int("plrun/rdzv/current", signals, signal);
        if (!cur) return std::nullopt;
        if (*cur >= r) {
          r = *cur;
          break;
        }
        if ((*signal = signals.wait_for(kPoll))) return std::nullopt;
      }
    }
    const int index = static_cast<int>(store_.add(rdzv_key(r, "joined"), 1) - 1);
    store_.set(rdzv_key(r, "id/" + std::to_string(index)), o_.id);
    std::optional<int> n;
    if (o_.host) {
      n = close(r, signals, signal);
      if (*signal) return std::nullopt;
    } else {
      n = wait_int(rdzv_key(r, "closed"), signals, signal);
      if (!n) return std::nullopt;
    }
    if (index < *n) {
      Membership m;
      m.round = r;
      m.node_rank = index;
      m.num_nodes = *n;
      for (int i = 0; i < *n; ++i) m.ids.push_back(store_.get(rdzv_key(r, "id/" + std::to_string(i))));
      return m;
    }
    // Round r closed without this node: it runs with the others.  Ask it to end, when it has room
    // (a new round with this node then starts: job_rounds' "join"), and join the next round.
    if (*n < o_.max_nodes) {
      store_.compare_set("plrun/round/" + std::to_string(r) + "/end", "",
                         "join|0|node " + o_.id + " asked to join the job");
      plrun_line("round " + std::to_string(r) + " runs with " + std::to_string(*n) +
                 " node(s); asking it to make room for " + o_.id);
    } else {
      plrun_line("round " + std::to_string(r) + " runs with the most nodes allowed (" + std::to_string(o_.max_nodes) +
                 "); " + o_.id + " waits for the next round");
    }
    ++r;
  }
}

}  // namespace plrt::launcher
