#include "job_rounds.hpp"

#include <plrt/pl_store.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>

namespace plrt::launcher {

namespace {

using std::chrono::milliseconds;

// One store wait of the watcher: the longest a node takes to notice the end of a round, and to stop
// watching when its own round ends (about 10 requests a second from each node to node 0, while a
// job of several nodes runs; a single node has no watcher).
constexpr milliseconds kWatchSlice{100};

struct End {
  std::string kind;  // "failed" or "signal"
  int code = 1;
  std::string text;
};

End parse_end(const std::string& v) {
  End e;
  const size_t a = v.find('|'), b = a == std::string::npos ? a : v.find('|', a + 1);
  if (b == std::string::npos) return {"failed", 1, v};
  e.kind = v.substr(0, a);
  e.code = std::atoi(v.substr(a + 1, b - a - 1).c_str());
  e.text = v.substr(b + 1);
  return e;
}

std::string seconds(milliseconds ms) {
  std::ostringstream o;
  o << ms.count() / 1000.0;
  return o.str();
}

std::string plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

JobRounds::JobRounds(const pl::Store& store, RoundsOptions options) : store_(store), o_(options) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw pl::Error(PL_ERR_RESOURCE, std::string("plrun: eventfd: ") + std::strerror(errno));
}

JobRounds::~JobRounds() {
  stop_watching();
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

std::string JobRounds::worker_prefix() const { return "plrt/round_" + std::to_string(round_) + "/"; }

std::string JobRounds::key(const std::string& name) const {
  return "plrun/round/" + std::to_string(round_) + "/" + name;
}

void JobRounds::set_membership(const Membership& m) {
  round_ = m.round;
  o_.node_rank = m.node_rank;
  o_.num_nodes = m.num_nodes;
  member_ids_ = m.ids;
}

void JobRounds::begin_round() {
  stop_watching();
  uint64_t drained;
  while (::read(stop_fd_, &drained, sizeof drained) > 0) {
  }
  if (o_.num_nodes == 1 && !o_.elastic) return;  // only this node's workers can end its rounds
  watching_ = true;
  watcher_ = std::thread([this, end_key = key("end")] { watch(end_key); });
}

// The watcher: waits for the round's end in short slices; an elastic job's node sends its
// heartbeat between two, and node 0 checks the others'.
void JobRounds::watch(const std::string& end_key) {
  std::vector<std::pair<std::string, Clock::time_point>> seen(member_ids_.size(), {"", Clock::now()});
  auto next_beat = Clock::now();
  int64_t beat = 0;
  while (watching_) {
    try {
      if (o_.elastic && Clock::now() >= next_beat) {
        heartbeat(++beat, seen);
        next_beat = Clock::now() + o_.heartbeat;
      }
      store_.wait({end_key}, kWatchSlice);
    } catch (const pl::Error& e) {
      if (e.code() == PL_ERR_TIMEOUT) continue;
      if (watching_) plrun_line("lost the job's store (" + std::string(e.what()) + "); stopping this node's workers");
    }
    break;
  }
  if (!watching_) return;
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
}

void JobRounds::heartbeat(int64_t beat, std::vector<std::pair<std::string, Clock::time_point>>& seen) {
  store_.set(rdzv_key(round_, "hb/" + std::to_string(o_.node_rank)), std::to_string(beat));
  if (!o_.host) return;
  const auto now = Clock::now();
  for (size_t i = 0; i < seen.size(); ++i) {
    if (static_cast<int>(i) == o_.node_rank) continue;
    const std::string k = rdzv_key(round_, "hb/" + std::to_string(i));
    const std::string v = store_.check_keys({k}) ? store_.get(k) : "";
    if (v != seen[i].first) {
      seen[i] = {v, now};
    } else if (now - seen[i].second > 3 * o_.heartbeat) {
      const auto silent = std::chrono::duration_cast<milliseconds>(now - seen[i].second);
      claim_end(
          "left", 0,
          "node " + std::to_string(i) + " (" + member_ids_[i] + ") sent no heartbeat for " + seconds(silent) + " s");
    }
  }
}

void JobRounds::stop_watching() {
  watching_ = false;
  if (watcher_.joinable()) watcher_.join();  // within one watch slice
}

bool JobRounds::claim_end(const std::string& kind, int code, const std::string& text) {
  const std::string mine = kind + "|" + std::to_string(code) + "|" + text;
  return store_.compare_set(key("end"), "", mine) == mine;
}

void JobRounds::on_worker_event(const WorkerEvent& ev, bool stopping) {
  if (stopping) return;  // the round is ending already: its first cause is recorded
  const std::string text =
      ev.label + " (pid " + std::to_string(ev.pid) + ", node " + std::to_string(o_.node_rank) + ") " + ev.how;
  try {
    // First, for the peers of that worker: whatever they still wait on will not come.
    store_.compare_set(worker_prefix() + PL_STORE_JOB_ENDED_KEY, "", text);
    if (ev.code != 0) claim_end("failed", ev.code, text);
  } catch (const pl::Error& e) {
    plrun_line("warning: could not record in the job's store that " + text + ": " + e.what());
  }
}

RoundOutcome JobRounds::finish_round(const SuperviseResult& res, SignalChannel& signals) {
  stop_watching();
  // A stop signal that came while the round was already ending for a failure still ends the job.
  const int signal = res.signal ? res.signal : signals.first_signal();
  const bool local_success = res.code == 0 && !res.failure && !signal && !res.stop_requested;
  try {
    if (signal && o_.elastic && !o_.host) {
      // An elastic job's node that is stopped (SIGTERM, or its plrun killed) leaves the job; the
      // others meet again without it.  Node 0 serves the store: its signal ends the job.
      const std::string who =
          "node " + std::to_string(o_.node_rank) +
          (o_.node_rank < static_cast<int>(member_ids_.size()) ? " (" + member_ids_[o_.node_rank] + ")" : "");
      claim_end("left", 0, who + " left the job (its plrun got signal " + std::to_string(signal) + ")");
      plrun_line("this node leaves the job (signal " + std::to_string(signal) + "); the others go on without it");
      return {RoundOutcome::Next::stop, 128 + signal};
    }
    if (signal) {
      claim_end("signal", 128 + signal, "node " + std::to_string(o_.node_rank) + "'s plrun got a stop signal");
    } else if (res.failure) {
      const auto& f = *res.failure;
      claim_end("failed", f.code,
                f.label + " (pid " + std::to_string(f.pid) + ", node " + std::to_string(o_.node_rank) + ") " + f.how);
    } else if (!local_success && !res.stop_requested) {
      claim_end("failed", res.code, "node " + std::to_string(o_.node_rank) + "'s workers failed");
    }
    return local_success ? after_success(signals) : after_failure(signals);
  } catch (const pl::Error& e) {
    const int code = res.code != 0 ? res.code : 1;
    plrun_line("lost the job's store, which node 0's plrun serves (" + std::string(e.what()) +
               "); this node cannot go on: exiting with code " + std::to_string(code));
    return {RoundOutcome::Next::stop, code};
  }
}

// The nodes of this round that have not said they stopped (after_failure's "stopped/<rank>"),
// as "node 1 (<its id>)", comma-separated.
std::string JobRounds::gone_nodes() const {
  std::string out;
  for (int r = 0; r < o_.num_nodes; ++r) {
    if (store_.check_keys({key("stopped/" + std::to_string(r))})) continue;
    out += (out.empty() ? "node " : ", node ") + std::to_string(r);
    if (r < static_cast<int>(member_ids_.size())) out += " (" + member_ids_[r] + ")";
  }
  return out;
}

RoundOutcome JobRounds::after_success(SignalChannel& signals) {
  if (o_.num_nodes == 1 && o_.max_restarts == 0) return {};
  int64_t done = store_.add(key("done"), 1);
  const auto until = Clock::now() + o_.exit_barrier;
  bool told = false;
  while (done < o_.num_nodes) {
    if (store_.check_keys({key("end")})) return after_failure(signals);  // another node's round failed
    if (!told && o_.host) {
      plrun_line("this node's workers are done; serving the store until the other nodes' are too (at most " +
                 seconds(o_.exit_barrier) + " s)");
      told = true;
    }
    if (Clock::now() >= until) {
      plrun_line("warning: " + std::to_string(done) + " of " + std::to_string(o_.num_nodes) +
                 " nodes reported done within " + seconds(o_.exit_barrier) +
                 " s (--exit-barrier-timeout); stopping anyway");
      return {};
    }
    if (int sig = signals.wait_for(kPoll)) return {RoundOutcome::Next::stop, 128 + sig};
    done = store_.add(key("done"), 0);
  }
  // Every node is done.  Node 0 serves the store until the others have seen it (briefly).
  int64_t left = store_.add(key("left"), 1);
  for (const auto until_left = Clock::now() + milliseconds(5000);
       o_.host && left < o_.num_nodes && Clock::now() < until_left;) {
    if (int sig = signals.wait_for(kPoll)) return {RoundOutcome::Next::stop, 128 + sig};
    left = store_.add(key("left"), 0);
  }
  return {};
}

RoundOutcome JobRounds::after_failure(SignalChannel& signals) {
  // Who stopped, then how many: the node that decides names the ones that never said so.
  store_.set(key("stopped/" + std::to_string(o_.node_rank)), "1");
  store_.add(key("stopped"), 1);
  const End end = parse_end(store_.get(key("end"), o_.stop_timeout));
  if (store_.add(key("decided"), 1) == 1) {
    // Elastic: wait (briefly: a node that is gone never reports) for the others to stop, so that
    // a missing node is seen and the next round knows whom to expect.
    int64_t stopped = store_.add(key("stopped"), 0);
    // A node that left (no heartbeat) is known gone: only the others are waited for.
    const auto bound = end.kind == "left" ? milliseconds(1000) : 3 * o_.heartbeat + milliseconds(1000);
    for (const auto until = Clock::now() + bound; o_.elastic && stopped < o_.num_nodes && Clock::now() < until;
         stopped = store_.add(key("stopped"), 0))
      std::this_thread::sleep_for(kPoll);
    std::string next = "stop|" + std::to_string(end.code);
    if (end.kind == "signal") {
    } else if (o_.elastic && (end.kind == "join" || end.kind == "left" || stopped < o_.num_nodes)) {
      next = "regroup|" + std::to_string(o_.num_nodes - stopped) + "|" + gone_nodes();
    } else if (end.kind == "failed" && o_.max_restarts > 0) {
      const int64_t count = store_.add("plrun/restarts", 1);
      if (count <= o_.max_restarts) next = "restart|" + std::to_string(count);
    }
    if (o_.elastic && next.rfind("stop", 0) != 0) {
      // The next round expects the nodes that stopped and the ones that asked to join.
      const int64_t joined = store_.add(rdzv_key(round_, "joined"), 0);
      store_.set(rdzv_key(round_ + 1, "expected"),
                 std::to_string(stopped + std::max<int64_t>(0, joined - o_.num_nodes)));
    }
    store_.set(key("next"), next);
  }
  End next = parse_end(store_.get(key("next"), o_.stop_timeout + 3 * o_.heartbeat) + "|");
  if (!next.text.empty()) next.text.pop_back();  // the '|' added above ("stop|1|": none)
  if (next.kind == "regroup") {
    plrun_line("round " + std::to_string(round_) + " ended: " + end.text +
               (next.code <= 0                                  ? ""
                : end.text.find(next.text) != std::string::npos ? ""  // "node 1 (host:pid) left the job"
                : !next.text.empty() ? "; " + next.text + (next.code > 1 ? " are" : " is") + " gone"
                                     : " (" + std::to_string(next.code) + " node(s) gone)") +
               "; the nodes meet again for round " + std::to_string(round_ + 1) + " (not counted as a restart)");
    ++round_;
    return {RoundOutcome::Next::restart, 0};
  }
  if (o_.elastic && next.kind == "restart") {
    restarts_ = next.code;
    plrun_line("round " + std::to_string(round_) + " ended: " + end.text + "; restart " + std::to_string(restarts_) +
               " of " + std::to_string(o_.max_restarts) + " (round " + std::to_string(round_ + 1) + ")");
    ++round_;
    return {RoundOutcome::Next::restart, 0};
  }
  // Every node's workers must be gone before any node starts the next round's.
  const auto until = Clock::now() + o_.stop_timeout;
  for (int64_t stopped = store_.add(key("stopped"), 0); stopped < o_.num_nodes;
       stopped = store_.add(key("stopped"), 0)) {
    if (Clock::now() >= until) {
      plrun_line("only " + std::to_string(stopped) + " of " + plural(o_.num_nodes, "node") +
                 " stopped their workers within " + seconds(o_.stop_timeout) + " s after round " +
                 std::to_string(round_) + " ended (" + end.text + "); a node is gone: exiting with code " +
                 std::to_string(end.code));
      return {RoundOutcome::Next::stop, end.code};
    }
    if (int sig = signals.wait_for(kPoll)) return {RoundOutcome::Next::stop, 128 + sig};
  }
  if (next.kind == "restart") {
    restarts_ = next.code;
    plrun_line("round " + std::to_string(round_) + " ended: " + end.text + "; restart " + std::to_string(restarts_) +
               " of " + std::to_string(o_.max_restarts) + " (round " + std::to_string(round_ + 1) + ")");
    ++round_;
    return {RoundOutcome::Next::restart, 0};
  }
  if (end.kind == "failed" && o_.max_restarts > 0)
    plrun_line(end.text + "; the " + plural(o_.max_restarts, "restart") + " allowed (--max-restarts " +
               std::to_string(o_.max_restarts) + ") are used up: exiting with its code " + std::to_string(end.code));
  return {RoundOutcome::Next::stop, end.code};
}

}  // namespace plrt::launcher
