// GroupCore: the backend-independent half of a process-group plugin (gloo; nccl reuses it).
//
// A backend checks a call's arguments, builds its OpDesc and hands the core a body that runs the
// transport's operation; the core numbers it, runs it in issue order (on the caller's thread when
// blocking, else on the group's worker thread with a PL_Work handle), bounds it by the group's
// timeout, detects mismatched collectives, and turns every failure into one precise message that
// every rank reports alike.  The backend supplies one more thing: abort_transport(reason), which
// must wake every pending transport operation of the group with an error (gloo: the tcp pairs'
// signalExceptionExternal; nccl: ncclCommAbort), callable from any thread.
//
// ORDER.  Every op (send/recv included) executes in the order it was issued.  A blocking call
// (out == NULL) runs on the caller's thread when nothing is queued or running; otherwise it is
// queued behind the pending work and the caller waits for it.  An async call is queued to the
// worker thread and returns a PL_Work.  Send and recv (run_p2p) are *posted* in that order, and
// their transfers complete independently (so a rank may post a send, then a recv, in a ring): a
// blocking call waits for its transfer on the caller's thread, an async one on a thread of its own.
//
// SEQUENCE NUMBERS AND TAGS.  Collectives are numbered 1, 2, ... per group in issue order (send
// and recv are not: they pair up by (peer, tag, dtype, count), not by position).  The body gets
// tag = fold_tag(desc.fingerprint(seq)), a 32-bit hash of the sequence number and the descriptor
// (op, reduce op, dtype, element counts of every rank, root; all_to_all: op, dtype and, for equal
// chunks, the element count: its per-rank counts differ by design and are checked by the backend,
// see AgreedFailure).  The backend gives it to the
// transport as the op's tag/slot, so ranks that call different things at the same number use
// different slots: their messages never match, nothing is corrupted, and the op blocks until the
// checks below name the mismatch.  (A 32-bit collision lets a mismatch through with probability
// 2^-32 per mismatched call.)
//
// WHAT THE CHECKS COST.
//   Fast path, per op: one 64-bit hash of the descriptor (a multiply per field), one clock read,
//   two uncontended mutex lock/unlock pairs (the executor token) and two more around the
//   "running op" record that the watchdog reads; no store traffic, no thread hand-off, no
//   allocation beyond the body's std::function.  The watchdog thread wakes a few times a second
//   (every min(probe, timeout)/4, 5..250 ms) and reads that record.
//   Slow ops only: an op still running after probe_ms (option, default 1000 ms, capped at a quarter
//   of the timeout; 0 disables probing) costs three store requests once (state key, arrival
//   counter, compare_set of the op key) and up to three `check`s per probe interval: the verdict
//   key, PL_STORE_JOB_ENDED_KEY (pl_store.h) and P/aborted.  The second makes an op that waits on a
//   process that has ended (plrun records any worker's end there) fail within a probe interval or
//   two, every rank with the same message ("gloo allreduce #3 (...) failed: rank 1 (pid 42, node
//   0) exited with code 0"), instead of at the group's timeout (30 minutes by default); the third
//   does the same for a rank that aborted the group, where the transport has not noticed it.
//   Failures only: the diagnosis below (store reads for at most 2 s).
//   Send/recv are outside all this (no sequence number, no probe); an async one costs a thread
//   that waits for its transfer, a blocking one waits on the caller's thread.
//
// TIMEOUTS.  The body gets the op's deadline (start + the group's timeout) and passes the time
// left to the transport; the watchdog also enforces the deadline itself (abort_transport at the
// deadline), since a transport's timeout may be per wait rather than per operation.
//
// FAILURE DIAGNOSIS.  When a body throws (transport timeout, connection closed, abort), the core
// aborts the transport (so that peers fail at once instead of at their own timeout), publishes
// this rank's state and, for at most clamp(timeout/2, 0.5 s, 2 s), reads the other ranks' states
// and the verdict key, then settles on one message, stored with compare_set so that every rank
// reports the first one written:
//   - "mismatched collectives at #5: rank 0 called allgather(float32, 1 element from each rank);
//      rank 1 called allreduce(sum, float32, 4 elements)"
//   - "gloo allreduce #12 (sum, float32, 7 elements) timed out after 2000 ms: rank 2 never
//      arrived (ranks 0, 1 were waiting)"                                  (PL_ERR_TIMEOUT)
//   - "gloo allreduce #3 (...) failed: rank 1 aborted its group (aborted by the caller)"
//   - "gloo allreduce #3 (...) failed: connection to rank 1 lost (it exited or aborted its group)"
// After any failure (or abort) the group is unusable: every later call fails at once with
// "<backend> group '<name>' is unusable after an earlier failure: <the first message>".
//
// STORE KEYS (all under P = "<group>/<incarnation>"; the incarnation is how many times this rank
// created a group of this name on this store, so a re-created group never reads stale keys):
//   P/state/<rank>   "<seq>|<fingerprint hex>|<descriptor text>", or "<seq>|aborted|<reason>"
//   P/op/<seq>       compare_set by every probing rank: the first descriptor wins
//   P/arrived/<seq>  counter of the ranks that probed #seq
//   P/verdict        "<error code>|<message>": the message every rank reports
//   P/aborted        "rank <r> aborted its group (<reason>)": the first rank that aborted it
//   the backend's own rendezvous keys under key_prefix() + "/<backend>/".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "op_desc.hpp"
#include "plugin_support.hpp"
#include "store_client.hpp"

namespace plrt::pg {

using Clock = std::chrono::steady_clock;

// What a body knows about the op it runs.
struct OpContext {
  uint64_t seq = 0;  // the collective's sequence number; 0 for send/recv
  uint32_t tag = 0;  // fold_tag(desc.fingerprint(seq)): the transport tag of this op
  Clock::time_point deadline;
  int64_t timeout_ms = 0;  // the group's timeout when the op started
  // Time left until the deadline, at least 1 ms (a transport reads 0 as "no timeout").
  std::chrono::milliseconds remaining() const;
};

// Runs the transport's operation; throws (any std::exception) on failure.
using OpBody = std::function<void(const OpContext&)>;
// Send/recv: posts the transfer without waiting for the peer and returns the function that waits
// for it (called once, with the same context; it throws on failure).
using P2PWait = std::function<void(const OpContext&)>;
using P2PPost = std::function<P2PWait(const OpContext&)>;
// Thrown by a body for an error that every rank established alike from what the ranks exchanged
// in this op (all_to_all: peers that disagree on their counts).  The core reports it as is, as
// "<title>: <message>" with its code, without the diagnosis, and the group stays usable: every
// rank left the op at the same point, with the transport in step.
struct AgreedFailure : plugin::Failure {
  using plugin::Failure::Failure;
};

// Wakes every pending transport operation with an error; any thread; called more than once.
using AbortTransport = std::function<void(const std::string& reason)>;

struct CoreConfig {
  const PL_Host* host = nullptr;
  std::string backend;  // "gloo": begins messages, and is the log source
  std::string group;    // the group's name: prefixes its store keys
  PL_Store* store = nullptr;
  int rank = 0;
  int world = 1;
  int64_t timeout_ms = PL_DEFAULT_TIMEOUT_MS;
  int64_t probe_ms = 1000;  // 0: no probes (a mismatch then ends as a timeout naming both ops' ranks)
};

struct OpState;  // one issued op: its completion and error (group_core.cpp)

class GroupCore {
 public:
  // Reads the group's incarnation from the store (throws plugin::Failure); starts no thread.
  explicit GroupCore(CoreConfig config);
  ~GroupCore();  // shutdown()
  GroupCore(const GroupCore&) = delete;
  GroupCore& operator=(const GroupCore&) = delete;

  const CoreConfig& config() const { return cfg_; }
  const std::string& key_prefix() const { return prefix_; }  // "<group>/<incarnation>"
  const StoreClient& store() const { return store_; }

  // Starts the worker and the watchdog, once the transport is connected.  `abort_transport` may
  // be empty (a world of one rank has no transport).
  void start(AbortTransport abort_transport);

  // Issues an op.  out == NULL: blocks until it completes and throws plugin::Failure with its
  // error; otherwise queues it and sets *out (owned by the caller: work_destroy).  An unusable
  // group throws at once.  `desc` and `body` are kept until the op completes.
  void run(OpDesc desc, OpBody body, PL_Work** out);
  // Issues a send or recv (desc.kind kSend/kRecv): `post` runs in issue order, the wait it returns
  // does not hold up the ops issued after it.  Blocking and async as run().
  void run_p2p(OpDesc desc, P2PPost post, PL_Work** out);

  void throw_if_unusable() const;        // plugin::Failure repeating the first failure
  void set_timeout(int64_t timeout_ms);  // <= 0: PL_DEFAULT_TIMEOUT_MS; applies to ops started later
  int64_t timeout_ms() const { return timeout_ms_.load(std::memory_order_relaxed); }
  // Fails the running op and every queued and later one; any thread; returns at once.
  void abort(const std::string& reason);
  // Runs what is queued (each op bounded by its timeout), stops the threads.  Idempotent.  After
  // it, abort_transport is never called again: the backend may tear its transport down.
  void shutdown();

  // The PL_ProcessGroupApi work entries (work_wait, work_test, work_destroy).
  static PL_Error* work_wait(PL_Work* work, int64_t timeout_ms) noexcept;
  static PL_Error* work_test(PL_Work* work, int32_t* out_completed) noexcept;
  static void work_destroy(PL_Work* work) noexcept;

 private:
  struct Outcome {
    PL_ErrorCode code = PL_ERR_OK;
    std::string message;
  };
  struct Task {
    OpDesc desc;
    OpBody body;
    uint64_t seq = 0;
    std::shared_ptr<OpState> state;
  };
  struct Running {  // the op being executed, as the watchdog sees it (under cur_m_)
    bool active = false;
    uint64_t op_id = 0;  // every op, send/recv included
    uint64_t seq = 0;
    const OpDesc* desc = nullptr;
    Clock::time_point start, deadline;
    int64_t timeout_ms = 0;
    bool probed = false;
    bool deadline_hit = false;
    Clock::time_point next_verdict_check;
  };
  struct RankState {  // a parsed P/state/<rank>
    uint64_t seq = 0;
    bool aborted = false;
    std::string fingerprint;  // hex, or the abort reason
    std::string text;
  };

  // group_core.cpp: executor, work handles, failure state
  void submit(OpDesc desc, OpBody body, std::shared_ptr<OpState> p2p, PL_Work** out);
  Outcome execute(const OpDesc& desc, uint64_t seq, OpBody& body);
  Outcome finish_p2p(OpState& st);
  void spawn_finisher(std::shared_ptr<OpState> st);
  void worker_loop();
  std::shared_ptr<OpState> make_state(const OpDesc& desc, uint64_t seq);
  void mark_broken(const Outcome& o);
  Outcome unusable_outcome() const;
  void abort_transport(const std::string& reason);

  // diagnosis.cpp: watchdog, probes, failure messages
  void watchdog_loop();
  Clock::duration watchdog_tick();
  void probe(uint64_t seq, const OpDesc& desc, int64_t after_ms);
  void publish_abort_state();
  std::string abort_reason() const;
  Outcome diagnose(const OpDesc& desc, const Running& r, const std::string& what);
  int64_t probe_interval_ms(int64_t timeout_ms) const;
  std::string state_key(int rank) const;
  std::vector<std::optional<RankState>> read_states() const;
  std::optional<Outcome> read_verdict() const;
  Outcome publish_verdict(const Outcome& o) const;
  std::string mismatch_message(uint64_t seq, const std::vector<std::optional<RankState>>& st) const;
  std::string timeout_message(const OpDesc& desc, const Running& r,
                              const std::vector<std::optional<RankState>>& st) const;

  CoreConfig cfg_;
  StoreClient store_;
  std::string prefix_;
  std::string unusable_prefix_;  // "gloo group 'default' is unusable after an earlier failure: "
  std::atomic<int64_t> timeout_ms_;

  // executor (m_)
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;  // an op is executing (inline or on the worker)
  bool stopping_ = false;
  bool started_ = false;
  uint64_t next_seq_ = 0;
  std::thread worker_;

  // async send/recv waiting for their transfers, one thread each (fin_m_)
  std::mutex fin_m_;
  std::condition_variable fin_cv_;
  int finishers_ = 0;

  // failure state
  std::atomic<bool> broken_{false};
  std::atomic<bool> caller_aborted_{false};
  mutable std::mutex broken_m_;
  Outcome broken_state_;
  std::string abort_reason_;
  std::atomic<uint64_t> last_seq_{0};  // the last collective this rank started

  // the running op (cur_m_)
  std::mutex cur_m_;
  Running cur_;
  uint64_t next_op_id_ = 0;
  std::atomic<uint64_t> deadline_hit_op_{0};
  std::atomic<uint64_t> mismatch_seq_{0};

  // watchdog (wd_m_)
  std::mutex wd_m_;
  std::condition_variable wd_cv_;
  bool wd_stop_ = false;
  std::atomic<bool> publish_abort_{false};
  std::thread watchdog_;

  // transport (transport_m_)
  std::mutex transport_m_;
  AbortTransport abort_transport_;
  bool transport_live_ = false;
};

}  // namespace plrt::pg
