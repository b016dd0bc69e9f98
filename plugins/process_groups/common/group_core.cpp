// GroupCore: executor (issue order, inline blocking calls, the worker thread), work handles, and
// the group's failure state.  The watchdog, probes and failure diagnosis are in diagnosis.cpp.
#include "group_core.hpp"

#include <algorithm>

#include "plugin_support.hpp"

// The ABI's opaque work handle, as the process-group plugins built on this core define it.
struct PL_Work {
  const PL_Host* host;
  std::shared_ptr<plrt::pg::OpState> state;
};

namespace plrt::pg {

using plugin::fail;
using std::chrono::milliseconds;

struct OpState {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  PL_ErrorCode code = PL_ERR_OK;
  std::string message;
  std::string title;          // "gloo allreduce #3 (...)", for work_wait's timeout message
  GroupCore* core = nullptr;  // alive while !done: the core runs every queued op before it goes
  int64_t wait_ms = 0;        // the group's timeout when the op was issued
  // send/recv only
  bool p2p = false;
  bool blocking = false;  // issued with out == NULL: the caller waits for the transfer itself
  bool posted = false;    // posted by the worker; its transfer is not waited for yet
  OpDesc desc;
  OpContext ctx;
  P2PWait wait;

  void complete(PL_ErrorCode c, std::string msg) {
    {
      std::lock_guard<std::mutex> g(m);
      code = c;
      message = std::move(msg);
      done = true;
    }
    cv.notify_all();
  }
};

milliseconds OpContext::remaining() const {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(1));
}

GroupCore::GroupCore(CoreConfig config)
    : cfg_(std::move(config)),
      store_(cfg_.host, cfg_.store),
      timeout_ms_(cfg_.timeout_ms > 0 ? cfg_.timeout_ms : PL_DEFAULT_TIMEOUT_MS) {
  cfg_.timeout_ms = timeout_ms_.load();
  int64_t incarnation = 0;
  try {
    incarnation = store_.add(cfg_.group + "/incarnation/" + std::to_string(cfg_.rank), 1);
  } catch (const plugin::Failure& f) {
    fail(f.code, cfg_.backend + ": group '" + cfg_.group + "' (rank " + std::to_string(cfg_.rank) +
                     "): the rendezvous store failed: " + f.message);
  }
  prefix_ = cfg_.group + "/" + std::to_string(incarnation);
  unusable_prefix_ = cfg_.backend + " group '" + cfg_.group + "' is unusable after an earlier failure: ";
}

GroupCore::~GroupCore() { shutdown(); }

void GroupCore::start(AbortTransport abort_transport) {
  {
    std::lock_guard<std::mutex> g(transport_m_);
    abort_transport_ = std::move(abort_transport);
    transport_live_ = static_cast<bool>(abort_transport_);
  }
  {
    std::lock_guard<std::mutex> g(m_);
    started_ = true;
  }
  worker_ = std::thread([this] { worker_loop(); });
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

std::shared_ptr<OpState> GroupCore::make_state(const OpDesc& desc, uint64_t seq) {
  auto st = std::make_shared<OpState>();
  st->title = desc.title(cfg_.backend, seq);
  st->core = this;
  st->wait_ms = timeout_ms();
  return st;
}

void GroupCore::run(OpDesc desc, OpBody body, PL_Work** out) { submit(std::move(desc), std::move(body), nullptr, out); }

void GroupCore::run_p2p(OpDesc desc, P2PPost post, PL_Work** out) {
  throw_if_unusable();
  auto st = make_state(desc, 0);
  st->p2p = true;
  st->blocking = out == nullptr;
  st->desc = desc;
  OpState* raw = st.get();  // the body lives in the Task or on the stack, never longer than st
  OpBody body = [raw, post = std::move(post)](const OpContext& oc) {
    P2PWait w = post(oc);
    std::lock_guard<std::mutex> g(raw->m);
    raw->wait = std::move(w);
    raw->ctx = oc;
  };
  submit(std::move(desc), std::move(body), std::move(st), out);
}

void GroupCore::submit(OpDesc desc, OpBody body, std::shared_ptr<OpState> p2p, PL_Work** out) {
  throw_if_unusable();
  std::unique_lock<std::mutex> lk(m_);
  if (stopping_ || !started_)
    fail(PL_ERR_RUNTIME,
         cfg_.backend + " group '" + cfg_.group + "' is " + (stopping_ ? "being destroyed" : "not connected"));
  const uint64_t seq = desc.is_p2p() ? 0 : ++next_seq_;
  if (out == nullptr && !busy_ && queue_.empty()) {
    // The fast path: nothing queued or running, so run on the caller's thread.
    busy_ = true;
    lk.unlock();
    Outcome o = execute(desc, seq, body);
    lk.lock();
    busy_ = false;
    const bool more = !queue_.empty();
    lk.unlock();
    if (more) cv_.notify_all();
    if (o.code == PL_ERR_OK && p2p) o = finish_p2p(*p2p);  // the transfer, off the order
    if (o.code != PL_ERR_OK) fail(o.code, std::move(o.message));
    return;
  }
  // Work is queued (or this is an async call): queue behind it.
  std::shared_ptr<OpState> st = p2p ? p2p : make_state(desc, seq);
  queue_.push_back(Task{std::move(desc), std::move(body), seq, st});
  lk.unlock();
  cv_.notify_all();
  if (out != nullptr) {
    *out = new PL_Work{cfg_.host, st};
    return;
  }
  std::unique_lock<std::mutex> sl(st->m);
  st->cv.wait(sl, [&] { return st->done || st->posted; });
  if (!st->done) {  // a blocking send/recv that the worker posted: wait for its transfer here
    sl.unlock();
    Outcome o = finish_p2p(*st);
    st->complete(o.code, o.message);
    sl.lock();
  }
  if (st->code != PL_ERR_OK) fail(st->code, st->message);
}

GroupCore::Outcome GroupCore::finish_p2p(OpState& st) {
  P2PWait wait;
  OpContext ctx;
  {
    std::lock_guard<std::mutex> g(st.m);
    wait = std::move(st.wait);
    ctx = st.ctx;
  }
  std::string what;
  try {
    if (wait) wait(ctx);
    return {};
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  wait = nullptr;  // the transfer's buffers: the transport has let go of them once the wait failed
  Running r;
  r.deadline = ctx.deadline;
  r.timeout_ms = ctx.timeout_ms;
  Outcome o = diagnose(st.desc, r, what);
  mark_broken(o);
  plugin::logf(cfg_.host, PL_LOG_ERROR, cfg_.backend.c_str(), "%s", o.message.c_str());
  return o;
}

void GroupCore::spawn_finisher(std::shared_ptr<OpState> st) {
  {
    std::lock_guard<std::mutex> g(fin_m_);
    ++finishers_;
  }
  try {
    std::thread([this, st] {
      Outcome o = finish_p2p(*st);
      st->complete(o.code, std::move(o.message));
      std::lock_guard<std::mutex> g(fin_m_);
      --finishers_;
      fin_cv_.notify_all();  // under the lock: shutdown cannot return before this thread is done with `this`
    }).detach();
  } catch (...) {  // no thread: wait for the transfer here instead
    {
      std::lock_guard<std::mutex> g(fin_m_);
      --finishers_;
    }
    Outcome o = finish_p2p(*st);
    st->complete(o.code, std::move(o.message));
  }
}

void GroupCore::worker_loop() {
  for (;;) {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return (!busy_ && !queue_.empty()) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping, and everything issued has run
    Task t = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    Outcome o = execute(t.desc, t.seq, t.body);
    t.body = nullptr;  // drop the body's captures before the op counts as complete
    lk.lock();
    busy_ = false;
    lk.unlock();
    cv_.notify_all();
    if (o.code == PL_ERR_OK && t.state->p2p) {  // posted: its transfer completes off the order
      if (t.state->blocking) {
        std::lock_guard<std::mutex> g(t.state->m);
        t.state->posted = true;
        t.state->cv.notify_all();
      } else {
        spawn_finisher(t.state);
      }
      continue;
    }
    t.state->complete(o.code, std::move(o.message));
  }
}

GroupCore::Outcome GroupCore::execute(const OpDesc& desc, uint64_t seq, OpBody& body) {
  if (broken_.load(std::memory_order_acquire)) return unusable_outcome();
  OpContext ctx;
  ctx.seq = seq;
  ctx.tag = fold_tag(desc.fingerprint(seq));
  const int64_t tmo = timeout_ms_.load(std::memory_order_relaxed);
  const auto start = Clock::now();
  ctx.deadline = start + milliseconds(tmo);
  ctx.timeout_ms = tmo;
  {
    std::lock_guard<std::mutex> g(cur_m_);
    cur_.active = true;
    cur_.op_id = ++next_op_id_;
    cur_.seq = seq;
    cur_.desc = &desc;
    cur_.start = start;
    cur_.deadline = ctx.deadline;
    cur_.timeout_ms = tmo;
    cur_.probed = false;
    cur_.deadline_hit = false;
  }
  if (seq != 0) last_seq_.store(seq, std::memory_order_relaxed);
  bool failed = false;
  std::string what;
  std::optional<Outcome> agreed;
  try {
    body(ctx);
  } catch (const AgreedFailure& f) {
    agreed = Outcome{f.code, desc.title(cfg_.backend, seq) + ": " + f.message};
  } catch (const std::exception& e) {
    failed = true;
    what = e.what();
  } catch (...) {
    failed = true;
    what = "unknown exception";
  }
  Running snap;
  {
    std::lock_guard<std::mutex> g(cur_m_);
    snap = cur_;
    snap.desc = nullptr;
    cur_.active = false;
    cur_.desc = nullptr;
  }
  if (agreed) return *agreed;  // every rank fails alike; the group stays usable
  if (!failed) return {};
  Outcome o = diagnose(desc, snap, what);
  mark_broken(o);
  plugin::logf(cfg_.host, PL_LOG_ERROR, cfg_.backend.c_str(), "%s", o.message.c_str());
  return o;
}

void GroupCore::mark_broken(const Outcome& o) {
  std::lock_guard<std::mutex> g(broken_m_);
  if (broken_.load(std::memory_order_relaxed)) return;
  broken_state_ = o;
  broken_.store(true, std::memory_order_release);
}

GroupCore::Outcome GroupCore::unusable_outcome() const {
  std::lock_guard<std::mutex> g(broken_m_);
  return {broken_state_.code, unusable_prefix_ + broken_state_.message};
}

void GroupCore::throw_if_unusable() const {
  if (!broken_.load(std::memory_order_acquire)) return;
  Outcome o = unusable_outcome();
  fail(o.code, std::move(o.message));
}

void GroupCore::set_timeout(int64_t timeout_ms) {
  timeout_ms_.store(timeout_ms > 0 ? timeout_ms : PL_DEFAULT_TIMEOUT_MS, std::memory_order_relaxed);
}

void GroupCore::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(broken_m_);
    if (abort_reason_.empty()) abort_reason_ = reason;
    if (!broken_.load(std::memory_order_relaxed)) {
      broken_state_ = {PL_ERR_RUNTIME, reason};
      broken_.store(true, std::memory_order_release);
    }
  }
  caller_aborted_.store(true, std::memory_order_release);
  plugin::logf(cfg_.host, PL_LOG_WARN, cfg_.backend.c_str(), "group '%s' (rank %d): %s", cfg_.group.c_str(), cfg_.rank,
               reason.c_str());
  abort_transport(reason);
  publish_abort_.store(true);
  wd_cv_.notify_all();
}

void GroupCore::abort_transport(const std::string& reason) {
  std::lock_guard<std::mutex> g(transport_m_);
  if (!transport_live_) return;
  try {
    abort_transport_(reason);
  } catch (const std::exception& e) {
    plugin::logf(cfg_.host, PL_LOG_WARN, cfg_.backend.c_str(), "aborting the transport failed: %s", e.what());
  } catch (...) {
  }
}

void GroupCore::shutdown() {
  {
    std::lock_guard<std::mutex> g(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();  // runs what is queued: each op is bounded by its timeout
  {
    std::unique_lock<std::mutex> lk(fin_m_);  // async send/recv still transferring, also bounded
    fin_cv_.wait(lk, [&] { return finishers_ == 0; });
  }
  {
    std::lock_guard<std::mutex> g(wd_m_);
    wd_stop_ = true;
  }
  wd_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard<std::mutex> g(transport_m_);
  transport_live_ = false;
  abort_transport_ = nullptr;
}

// ---- work handles -------------------------------------------------------------------------------

PL_Error* GroupCore::work_wait(PL_Work* work, int64_t timeout_ms) noexcept {
  if (work == nullptr) return nullptr;  // no host to report through (ABI rule 7)
  return plugin::guard(work->host, [&] {
    OpState& st = *work->state;
    const int64_t t = timeout_ms > 0 ? timeout_ms : st.wait_ms;
    std::unique_lock<std::mutex> lk(st.m);
    if (!st.cv.wait_for(lk, milliseconds(t), [&] { return st.done; }))
      fail(PL_ERR_TIMEOUT, st.title + " is not complete after " + std::to_string(t) +
                               " ms of work_wait (it goes on, bounded by the group's timeout)");
    if (st.code != PL_ERR_OK) fail(st.code, st.message);
  });
}

PL_Error* GroupCore::work_test(PL_Work* work, int32_t* out_completed) noexcept {
  if (work == nullptr) return nullptr;
  return plugin::guard(work->host, [&] {
    if (out_completed == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "work_test: out_completed is NULL");
    OpState& st = *work->state;
    std::lock_guard<std::mutex> lk(st.m);
    *out_completed = st.done ? 1 : 0;
    if (st.done && st.code != PL_ERR_OK) fail(st.code, st.message);
  });
}

void GroupCore::work_destroy(PL_Work* work) noexcept {
  if (work == nullptr) return;
  try {
    std::shared_ptr<OpState> st = work->state;
    std::unique_lock<std::mutex> lk(st->m);
    // The tensors stay borrowed until the op completes: wait for it (its timeout plus the time a
    // failure diagnosis may take); past that, abort the group so that it ends now.
    if (!st->cv.wait_for(lk, milliseconds(st->wait_ms + 5000), [&] { return st->done; })) {
      GroupCore* core = st->core;
      lk.unlock();
      core->abort("a work handle was destroyed before its operation (" + st->title + ") completed");
      lk.lock();
      st->cv.wait_for(lk, milliseconds(10000), [&] { return st->done; });
    }
  } catch (...) {
  }
  delete work;
}

}  // namespace plrt::pg
