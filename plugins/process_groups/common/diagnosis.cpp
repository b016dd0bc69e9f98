// GroupCore: the watchdog (probes of slow ops, the exact deadline, verdicts of other ranks) and
// the diagnosis that turns a failed op into one message every rank reports alike.  The protocol
// and its costs are described at the top of group_core.hpp.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>

#include "group_core.hpp"
#include "plugin_support.hpp"

namespace plrt::pg {

using std::chrono::milliseconds;

namespace {

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

// "rank 2" / "ranks 0, 1"
std::string ranks_text(const std::vector<int>& r) { return (r.size() == 1 ? "rank " : "ranks ") + rank_list(r); }

}  // namespace

int64_t GroupCore::probe_interval_ms(int64_t timeout_ms) const {
  if (cfg_.probe_ms <= 0) return 0;
  return std::max<int64_t>(1, std::min<int64_t>(cfg_.probe_ms, timeout_ms / 4));
}

std::string GroupCore::state_key(int rank) const { return prefix_ + "/state/" + std::to_string(rank); }

std::string GroupCore::abort_reason() const {
  std::lock_guard<std::mutex> g(broken_m_);
  return abort_reason_;
}

// ---- the watchdog ------------------------------------------------------------------------------

void GroupCore::watchdog_loop() {
  std::unique_lock<std::mutex> lk(wd_m_);
  while (!wd_stop_) {
    lk.unlock();
    const Clock::duration sleep = watchdog_tick();
    lk.lock();
    if (wd_stop_) break;
    wd_cv_.wait_for(lk, sleep);
  }
  lk.unlock();
  if (publish_abort_.exchange(false)) publish_abort_state();
}

void GroupCore::publish_abort_state() {
  try {
    store_.set(state_key(cfg_.rank), std::to_string(last_seq_.load()) + "|aborted|" + abort_reason());
    // the group's key, read by the peers' slow ops (watchdog_tick): the first abort is the one told
    store_.compare_set(prefix_ + "/aborted", "",
                       "rank " + std::to_string(cfg_.rank) + " aborted its group (" + abort_reason() + ")");
  } catch (const std::exception& e) {
    plugin::logf(cfg_.host, PL_LOG_DEBUG, cfg_.backend.c_str(), "publishing the abort failed: %s", e.what());
  }
}

Clock::duration GroupCore::watchdog_tick() {
  if (publish_abort_.exchange(false)) publish_abort_state();
  const int64_t tmo_now = timeout_ms();
  const int64_t probe_now = probe_interval_ms(tmo_now);
  const int64_t base = probe_now > 0 ? std::min(probe_now, tmo_now) : tmo_now;
  const milliseconds period(std::clamp<int64_t>(base / 4, 5, 250));
  auto now = Clock::now();
  Clock::time_point wake = now + period;

  std::optional<OpDesc> to_probe;
  uint64_t seq = 0;
  int64_t probe_ms = 0;
  bool check_verdict = false;
  std::string timed_out, title;
  {
    std::lock_guard<std::mutex> g(cur_m_);
    if (!cur_.active || broken_.load(std::memory_order_acquire)) return period;
    now = Clock::now();
    probe_ms = probe_interval_ms(cur_.timeout_ms);
    if (cur_.seq != 0 && probe_ms > 0) {
      const auto probe_at = cur_.start + milliseconds(probe_ms);
      if (!cur_.probed) {
        if (now >= probe_at) {
          cur_.probed = true;
          to_probe = *cur_.desc;
          seq = cur_.seq;
          cur_.next_verdict_check = now + milliseconds(probe_ms);
        } else {
          wake = std::min(wake, probe_at);
        }
      } else if (now >= cur_.next_verdict_check) {
        check_verdict = true;
        cur_.next_verdict_check = now + milliseconds(probe_ms);
      }
      if (to_probe || check_verdict) title = cur_.desc->title(cfg_.backend, cur_.seq);
    }
    if (!cur_.deadline_hit) {
      if (now >= cur_.deadline) {
        cur_.deadline_hit = true;
        deadline_hit_op_.store(cur_.op_id);
        timed_out =
            cur_.desc->title(cfg_.backend, cur_.seq) + " timed out after " + std::to_string(cur_.timeout_ms) + " ms";
      } else {
        wake = std::min(wake, cur_.deadline);
      }
    }
  }
  if (!timed_out.empty()) {
    abort_transport(timed_out);  // the op's body fails now; its diagnosis names the missing ranks
    return period;
  }
  try {
    if (to_probe) probe(seq, *to_probe, probe_ms);
    if (to_probe || check_verdict) {
      if (auto v = read_verdict()) {
        abort_transport(v->message);
      } else if (auto ended = store_.try_get(PL_STORE_JOB_ENDED_KEY)) {
        // A process of the job has ended (plrun says which): this op cannot complete.  The verdict
        // makes every rank of the group report the same message.
        abort_transport(publish_verdict({PL_ERR_RUNTIME, title + " failed: " + *ended}).message);
      } else if (auto aborted = store_.try_get(prefix_ + "/aborted")) {
        // A rank aborted the group: this op cannot complete, even where the transport has not
        // noticed the closed connections; the diagnosis names that rank (its state key).
        abort_transport(title + " failed: " + *aborted);
      }
    }
  } catch (const std::exception& e) {
    plugin::logf(cfg_.host, PL_LOG_DEBUG, cfg_.backend.c_str(), "probe failed: %s", e.what());
  }
  return std::max<Clock::duration>(wake - Clock::now(), milliseconds(1));
}

// Publishes this rank's state for a slow op and checks, with compare_set on the op key, that the
// first rank to probe this sequence number called the same thing.
void GroupCore::probe(uint64_t seq, const OpDesc& desc, int64_t after_ms) {
  const std::string fp = hex16(desc.fingerprint());
  const std::string text = desc.text();
  const std::string s = std::to_string(seq);
  store_.set(state_key(cfg_.rank), s + "|" + fp + "|" + text);
  const int64_t arrived = store_.add(prefix_ + "/arrived/" + s, 1);
  const std::string mine = fp + "|" + text;
  const std::string first = store_.compare_set(prefix_ + "/op/" + s, "", mine);
  const bool same = first.compare(0, fp.size(), fp) == 0;
  plugin::logf(cfg_.host, same ? PL_LOG_DEBUG : PL_LOG_ERROR, cfg_.backend.c_str(),
               "group '%s' #%s %s still running after %lld ms (%lld of %d ranks have reported it)%s%s",
               cfg_.group.c_str(), s.c_str(), text.c_str(), static_cast<long long>(after_ms),
               static_cast<long long>(arrived), cfg_.world, same ? "" : "; another rank called ",
               same ? "" : first.substr(std::min(first.size(), fp.size() + 1)).c_str());
  if (!same) {
    mismatch_seq_.store(seq);
    abort_transport("mismatched collectives at #" + s);  // the diagnosis names every rank's call
  }
}

// ---- store reads -------------------------------------------------------------------------------

std::vector<std::optional<GroupCore::RankState>> GroupCore::read_states() const {
  std::vector<std::optional<RankState>> out(static_cast<size_t>(cfg_.world));
  for (int q = 0; q < cfg_.world; ++q) {
    const auto v = store_.try_get(state_key(q));
    if (!v) continue;
    const size_t a = v->find('|');
    const size_t b = a == std::string::npos ? a : v->find('|', a + 1);
    if (b == std::string::npos) continue;
    RankState st;
    st.seq = std::strtoull(v->substr(0, a).c_str(), nullptr, 10);
    const std::string mid = v->substr(a + 1, b - a - 1);
    st.aborted = mid == "aborted";
    st.fingerprint = st.aborted ? v->substr(b + 1) : mid;
    st.text = v->substr(b + 1);
    out[static_cast<size_t>(q)] = std::move(st);
  }
  return out;
}

std::optional<GroupCore::Outcome> GroupCore::read_verdict() const {
  const auto v = store_.try_get(prefix_ + "/verdict");
  if (!v) return std::nullopt;
  const size_t bar = v->find('|');
  if (bar == std::string::npos) return std::nullopt;
  return Outcome{static_cast<PL_ErrorCode>(std::atoi(v->substr(0, bar).c_str())), v->substr(bar + 1)};
}

// Stores `o` as the group's verdict unless one is there already; returns the one that is.
GroupCore::Outcome GroupCore::publish_verdict(const Outcome& o) const {
  try {
    const std::string cur = store_.compare_set(prefix_ + "/verdict", "", std::to_string(o.code) + "|" + o.message);
    const size_t bar = cur.find('|');
    if (bar != std::string::npos)
      return Outcome{static_cast<PL_ErrorCode>(std::atoi(cur.substr(0, bar).c_str())), cur.substr(bar + 1)};
  } catch (const std::exception&) {
  }
  return o;
}

// ---- messages ----------------------------------------------------------------------------------

std::string GroupCore::mismatch_message(uint64_t seq, const std::vector<std::optional<RankState>>& st) const {
  std::vector<std::pair<std::string, std::vector<int>>> calls;  // text -> ranks, in rank order
  std::map<std::string, size_t> by_fp;
  std::vector<int> absent;
  for (int q = 0; q < cfg_.world; ++q) {
    const auto& s = st[static_cast<size_t>(q)];
    if (!s || s->aborted || s->seq != seq) {
      absent.push_back(q);
      continue;
    }
    auto it = by_fp.find(s->fingerprint);
    if (it == by_fp.end()) {
      by_fp.emplace(s->fingerprint, calls.size());
      calls.push_back({s->text, {q}});
    } else {
      calls[it->second].second.push_back(q);
    }
  }
  std::string m = "mismatched collectives at #" + std::to_string(seq) + ": ";
  for (size_t i = 0; i < calls.size(); ++i)
    m += (i ? "; " : "") + ranks_text(calls[i].second) + " called " + calls[i].first;
  if (!absent.empty())
    m += "; " + ranks_text(absent) + (absent.size() == 1 ? " has" : " have") + " not reached #" + std::to_string(seq);
  return m;
}

std::string GroupCore::timeout_message(const OpDesc& desc, const Running& r,
                                       const std::vector<std::optional<RankState>>& st) const {
  std::vector<int> waiting, never, ahead;
  for (int q = 0; q < cfg_.world; ++q) {
    const auto& s = st[static_cast<size_t>(q)];
    if (q == cfg_.rank || (s && !s->aborted && s->seq == r.seq))
      waiting.push_back(q);
    else if (s && !s->aborted && s->seq > r.seq)
      ahead.push_back(q);
    else
      never.push_back(q);
  }
  std::string m = desc.title(cfg_.backend, r.seq) + " timed out after " + std::to_string(r.timeout_ms) + " ms: ";
  if (never.empty() && ahead.empty())
    return m + "every rank arrived (" + ranks_text(waiting) + " were waiting) but the transport made no progress";
  if (!never.empty()) m += ranks_text(never) + " never arrived";
  if (!ahead.empty()) m += std::string(never.empty() ? "" : "; ") + ranks_text(ahead) + " already went past it";
  return m + " (" + ranks_text(waiting) + (waiting.size() == 1 ? " was" : " were") + " waiting)";
}

// ---- the diagnosis of a failed op --------------------------------------------------------------

GroupCore::Outcome GroupCore::diagnose(const OpDesc& desc, const Running& r, const std::string& what) {
  const std::string title = desc.title(cfg_.backend, r.seq);
  if (caller_aborted_.load(std::memory_order_acquire)) return {PL_ERR_RUNTIME, title + " failed: " + abort_reason()};
  const bool timed_out = (r.op_id != 0 && deadline_hit_op_.load() == r.op_id) ||
                         Clock::now() + milliseconds(50) >= r.deadline || what.find("imed out") != std::string::npos;
  plugin::logf(cfg_.host, PL_LOG_DEBUG, cfg_.backend.c_str(), "%s failed on rank %d: %s", title.c_str(), cfg_.rank,
               what.c_str());
  // Make the peers fail now rather than at their own timeout.
  abort_transport(title + " failed on rank " + std::to_string(cfg_.rank));

  if (r.seq == 0) {  // send/recv: outside the sequence, nothing to compare; the peer may have aborted
    if (timed_out)
      return {PL_ERR_TIMEOUT, title + " timed out after " + std::to_string(r.timeout_ms) + " ms: rank " +
                                  std::to_string(desc.peer) + " posted no matching " +
                                  (desc.kind == OpKind::kSend ? "recv" : "send") +
                                  " (same tag, dtype and element count)"};
    try {  // an aborting peer publishes why within a watchdog tick (<= 250 ms)
      for (const auto end = Clock::now() + milliseconds(500); Clock::now() < end;) {
        if (const auto v = store_.try_get(state_key(desc.peer))) {
          const size_t a = v->find("|aborted|");
          if (a != std::string::npos)
            return {PL_ERR_RUNTIME, title + " failed: rank " + std::to_string(desc.peer) + " aborted its group (" +
                                        v->substr(a + 9) + ")"};
        }
        std::this_thread::sleep_for(milliseconds(25));
      }
    } catch (const std::exception&) {
    }
    return {PL_ERR_RUNTIME, title + " failed: " + what};
  }

  const int64_t wait_ms = std::clamp<int64_t>(r.timeout_ms / 2, 500, 2000);
  const auto t0 = Clock::now();
  const auto settle = t0 + milliseconds(wait_ms / 2), end = t0 + milliseconds(wait_ms);
  const std::string fp = hex16(desc.fingerprint());
  try {
    store_.set(state_key(cfg_.rank), std::to_string(r.seq) + "|" + fp + "|" + desc.text());
    for (;;) {
      if (caller_aborted_.load(std::memory_order_acquire))
        return {PL_ERR_RUNTIME, title + " failed: " + abort_reason()};
      if (auto v = read_verdict()) return *v;
      const auto st = read_states();
      const auto now = Clock::now();
      bool all = true, mismatch = mismatch_seq_.load() == r.seq;
      int aborted = -1;
      for (int q = 0; q < cfg_.world; ++q) {
        const auto& s = st[static_cast<size_t>(q)];
        if (!s || (!s->aborted && s->seq < r.seq)) all = false;
        if (s && s->aborted && q != cfg_.rank && aborted < 0) aborted = q;
        if (s && !s->aborted && s->seq == r.seq && s->fingerprint != fp) mismatch = true;
      }
      const bool settled = all || now >= settle;
      if (mismatch && settled) return publish_verdict({PL_ERR_RUNTIME, mismatch_message(r.seq, st)});
      // a rank that aborted its group explains a timeout better than "never arrived"
      if (aborted >= 0 && (settled || !timed_out))
        return publish_verdict({PL_ERR_RUNTIME, title + " failed: rank " + std::to_string(aborted) +
                                                    " aborted its group (" + st[static_cast<size_t>(aborted)]->text +
                                                    ")"});
      if (timed_out && settled) return publish_verdict({PL_ERR_TIMEOUT, timeout_message(desc, r, st)});
      if (now >= end) {
        std::vector<int> lost;
        for (int q = 0; q < cfg_.world; ++q) {
          const auto& s = st[static_cast<size_t>(q)];
          if (q != cfg_.rank && (!s || s->seq < r.seq)) lost.push_back(q);
        }
        if (lost.empty()) return publish_verdict({PL_ERR_RUNTIME, title + " failed: " + what});
        const bool one = lost.size() == 1;
        return publish_verdict(
            {PL_ERR_RUNTIME, title + " failed: " + (one ? "connection to " : "connections to ") + ranks_text(lost) +
                                 " lost (" +
                                 (one ? "it exited or aborted its group)" : "they exited or aborted their group)")});
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  } catch (const std::exception& e) {
    return {timed_out ? PL_ERR_TIMEOUT : PL_ERR_RUNTIME,
            title + (timed_out ? " timed out after " + std::to_string(r.timeout_ms) + " ms" : " failed: " + what) +
                " (the rendezvous store could not be read to say more: " + e.what() + ")"};
  }
}

}  // namespace plrt::pg
