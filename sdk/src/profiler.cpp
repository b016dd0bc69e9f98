// The trainer's profiler: the per-action table and the Trace Event Format file (profiler.hpp).
#include "profiler.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <plrt/sdk/error.hpp>

namespace plrt::sdk {

Profiler::Mode Profiler::parse(const std::string& text, const std::string& what) {
  if (text.empty() || text == "none") return Mode::off;
  if (text == "simple") return Mode::simple;
  if (text == "trace") return Mode::trace;
  throw pl::Error(PL_ERR_INVALID_ARGUMENT, what + "='" + text +
                                               "' is not valid; valid: simple (a table of where fit's time went), "
                                               "trace (the table and a Chrome trace per rank), or none");
}

const char* Profiler::name(Mode m) { return m == Mode::simple ? "simple" : m == Mode::trace ? "trace" : "none"; }

void Profiler::begin(Mode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  mode_ = mode;
  t0_ = Clock::now();
  wall0_us_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  ids_.clear(), names_.clear(), stats_.clear(), events_.clear(), threads_.clear();
  dropped_ = 0;
}

uint32_t Profiler::thread_index() {
  const auto id = std::this_thread::get_id();
  for (size_t i = 0; i < threads_.size(); ++i)
    if (threads_[i] == id) return static_cast<uint32_t>(i);
  threads_.push_back(id);
  return static_cast<uint32_t>(threads_.size() - 1);
}

void Profiler::record(const std::string& action, Clock::time_point t0, Clock::time_point t1) {
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == Mode::off) return;
  auto [it, fresh] = ids_.try_emplace(action, static_cast<uint32_t>(names_.size()));
  if (fresh) names_.push_back(action), stats_.emplace_back();
  Stat& s = stats_[it->second];
  const auto dur = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  ++s.calls;
  s.total_s += static_cast<double>(dur) * 1e-9;
  if (mode_ != Mode::trace) return;
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(
      {it->second, thread_index(), std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - t0_).count(), dur});
}

size_t Profiler::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string Profiler::table(const std::string& stage, double total_s) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> order(names_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return stats_[a].total_s != stats_[b].total_s ? stats_[a].total_s > stats_[b].total_s : names_[a] < names_[b];
  });
  int64_t calls = 0;
  size_t width = std::string("Total").size();
  for (size_t i = 0; i < names_.size(); ++i) calls += stats_[i].calls, width = std::max(width, names_[i].size());
  auto row = [&](const std::string& action, const std::string& mean, const std::string& n, const std::string& total,
                 const std::string& share) {
    char buf[96];
    std::string line = "|  " + action + std::string(width - action.size(), ' ');
    std::snprintf(buf, sizeof buf, "  |  %-17s  |  %-9s  |  %-14s  |  %-12s  |", mean.c_str(), n.c_str(), total.c_str(),
                  share.c_str());
    return line + buf + "\n";
  };
  auto g = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.5g", v);
    return std::string(buf);
  };
  const std::string head = row("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %");
  const std::string rule = std::string(head.size() - 1, '-') + "\n";
  std::string out = stage + " Profiler Report\n\n" + rule + head + rule;
  out += row("Total", "-", std::to_string(calls), g(total_s), "100 %") + rule;
  for (size_t i : order) {
    const Stat& s = stats_[i];
    out += row(names_[i], g(s.total_s / static_cast<double>(s.calls)), std::to_string(s.calls), g(s.total_s),
               g(total_s > 0 ? 100.0 * s.total_s / total_s : 0.0));
  }
  return out + rule;
}

std::string Profiler::trace_json(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> order(events_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events_[a], &y = events_[b];
    return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.dur_ns > y.dur_ns;  // parents first
  });
  std::vector<std::string> quoted;
  quoted.reserve(names_.size());
  for (const auto& n : names_) quoted.push_back(nlohmann::json(n).dump());
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":" + std::to_string(rank) +
                    ",\"start_unix_us\":" + std::to_string(wall0_us_) +
                    ",\"dropped_events\":" + std::to_string(dropped_) + "},\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) +
         ",\"tid\":0,\"args\":{\"name\":\"rank " + std::to_string(rank) + "\"}}";
  char buf[160];
  for (size_t i : order) {
    const Event& e = events_[i];
    // microseconds since begin() with nanosecond digits (small enough for a double to keep them)
    std::snprintf(buf, sizeof buf,
                  ",\"cat\":\"plrt\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%lld.%03lld,\"dur\":%lld.%03lld}", rank,
                  e.thread, static_cast<long long>(e.start_ns / 1000), static_cast<long long>(e.start_ns % 1000),
                  static_cast<long long>(e.dur_ns / 1000), static_cast<long long>(e.dur_ns % 1000));
    out += ",\n{\"name\":" + quoted[e.action] + buf;
  }
  return out + "\n]}\n";
}

}  // namespace plrt::sdk
