// pl::Metric's states: registration, reset, and compute()'s one exact combination across ranks
// (every rank's states gathered as bytes, then reduced in rank order on every rank, so every rank
// computes the same value from the same numbers whatever the shards' sizes).
#include <algorithm>
#include <cstring>
#include <plrt/sdk/metric.hpp>

namespace pl {

namespace {

PL_Tensor host_bytes(void* p, PL_DType dt, int64_t n) { return tensor_view(p, dt, n); }

template <class T>
void put(std::string& out, const T* p, size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

template <class T>
void take(const std::string& in, size_t& pos, T* p, size_t n, const std::string& what) {
  const size_t bytes = n * sizeof(T);
  if (pos + bytes > in.size()) throw Error(PL_ERR_INVALID_ARGUMENT, what + ": a rank's states are truncated");
  if (bytes) std::memcpy(p, in.data() + pos, bytes);
  pos += bytes;
}

template <class T>
void fold(std::vector<T>& acc, const std::vector<T>& part, StateReduce reduce) {
  if (reduce == StateReduce::Cat) {
    acc.insert(acc.end(), part.begin(), part.end());
    return;
  }
  for (size_t i = 0; i < acc.size(); ++i) {
    if (reduce == StateReduce::Sum) acc[i] += part[i];
    if (reduce == StateReduce::Max) acc[i] = std::max(acc[i], part[i]);
    if (reduce == StateReduce::Min) acc[i] = std::min(acc[i], part[i]);
  }
}

}  // namespace

std::vector<std::string> ProcessGroupSync::allgather(const std::string& bytes) const {
  const int world = group_.world_size();
  if (world == 1) return {bytes};
  std::vector<int64_t> sizes(static_cast<size_t>(world));
  int64_t mine = static_cast<int64_t>(bytes.size());
  PL_Tensor in = host_bytes(&mine, PL_I64, 1);
  std::vector<PL_Tensor> outs;
  for (auto& s : sizes) outs.push_back(host_bytes(&s, PL_I64, 1));
  group_.allgather(in, outs);
  std::vector<std::string> result(static_cast<size_t>(world));
  std::string copy = bytes;  // the descriptor wants writable memory
  PL_Tensor bin = host_bytes(copy.data(), PL_U8, mine);
  outs.clear();
  for (size_t r = 0; r < result.size(); ++r) {
    result[r].resize(static_cast<size_t>(sizes[r]));
    outs.push_back(host_bytes(result[r].data(), PL_U8, sizes[r]));
  }
  group_.allgather(bin, outs);
  return result;
}

namespace detail {

// Per state: its element count (int64), then the values (int64 or float64).
std::string encode_states(const std::vector<MetricState>& states) {
  std::string out;
  for (const auto& s : states) {
    const int64_t n = static_cast<int64_t>(s.is_int ? s.i64.size() : s.f64.size());
    put(out, &n, 1);
    if (s.is_int)
      put(out, s.i64.data(), s.i64.size());
    else
      put(out, s.f64.data(), s.f64.size());
  }
  return out;
}

std::vector<MetricState> reduce_states(const std::vector<MetricState>& layout, const std::vector<std::string>& ranks,
                                       const std::string& metric) {
  std::vector<MetricState> acc;
  for (size_t r = 0; r < ranks.size(); ++r) {
    // "": a rank that took part without the metric (it logged it from no step this epoch)
    if (ranks[r].empty() && !layout.empty()) continue;
    const bool first = acc.empty();
    size_t pos = 0;
    const std::string what = "metric '" + metric + "' rank " + std::to_string(r);
    for (size_t i = 0; i < layout.size(); ++i) {
      MetricState part = layout[i];
      int64_t n = 0;
      take(ranks[r], pos, &n, 1, what);
      const size_t want = layout[i].is_int ? layout[i].i64_default.size() : layout[i].f64_default.size();
      if (n < 0 || (part.reduce != StateReduce::Cat && static_cast<size_t>(n) != want))
        throw Error(PL_ERR_INVALID_ARGUMENT, what + ": state '" + part.name + "' has " + std::to_string(n) +
                                                 " elements where this rank registered " + std::to_string(want) +
                                                 " (every rank must run the same metric with the same arguments)");
      part.i64.assign(part.is_int ? static_cast<size_t>(n) : 0, 0);
      part.f64.assign(part.is_int ? 0 : static_cast<size_t>(n), 0.0);
      if (part.is_int)
        take(ranks[r], pos, part.i64.data(), part.i64.size(), what);
      else
        take(ranks[r], pos, part.f64.data(), part.f64.size(), what);
      if (first) {
        acc.push_back(std::move(part));
      } else {
        fold(acc[i].i64, part.i64, part.reduce);
        fold(acc[i].f64, part.f64, part.reduce);
      }
    }
    if (pos != ranks[r].size())
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  what + ": has more states than this rank's " + std::to_string(layout.size()) + " (another metric?)");
  }
  if (acc.empty()) {  // no rank had it: the empty states
    acc = layout;
    for (auto& st : acc) st.f64 = st.f64_default, st.i64 = st.i64_default;
  }
  return acc;
}

}  // namespace detail

size_t Metric::add_state(const std::string& name, StateReduce reduce, size_t size, double value) {
  MetricState s;
  s.name = name;
  s.reduce = reduce;
  s.f64_default.assign(reduce == StateReduce::Cat ? 0 : size, value);
  s.f64 = s.f64_default;
  states_.push_back(std::move(s));
  return states_.size() - 1;
}

size_t Metric::add_int_state(const std::string& name, StateReduce reduce, size_t size, int64_t value) {
  MetricState s;
  s.name = name;
  s.reduce = reduce;
  s.is_int = true;
  s.i64_default.assign(reduce == StateReduce::Cat ? 0 : size, value);
  s.i64 = s.i64_default;
  states_.push_back(std::move(s));
  return states_.size() - 1;
}

void Metric::reset() {
  for (auto& s : states_) {
    s.f64 = s.f64_default;
    s.i64 = s.i64_default;
  }
  update_count_ = 0;
}

std::vector<MetricState> Metric::combined(const MetricSync& sync) const {
  if (sync.world_size() <= 1) return states_;
  return detail::reduce_states(states_, sync.allgather(detail::encode_states(states_)), name_);
}

double Metric::compute() {
  if (!sync_) return compute_from(states_);
  return compute(*sync_);
}

double Metric::compute(const MetricSync& sync) { return compute_from(combined(sync)); }

}  // namespace pl
