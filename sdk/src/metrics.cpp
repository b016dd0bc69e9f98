#include "metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/error.hpp>
#include <set>
#include <sstream>

namespace plrt::sdk {

template <class Start>
void Collectives::run(const char* action, Start start) const {
  const Profiler::Span timed(profiler_, action);
  PL_Work* w = nullptr;
  check(host_, start(&w));
  PL_Error* e = api_->work_wait(w, 0);  // 0: the group's timeout
  api_->work_destroy(w);
  check(host_, e);
}

void Collectives::no_route(const char* op) const {
  throw Error(PL_ERR_UNSUPPORTED, "strategy '" + (strategy_ ? strategy_->name() : std::string("?")) + "' has no " + op +
                                      " entry and no process group, so metrics cannot be combined across " +
                                      std::to_string(world_) + " processes; give it both reduce and all_gather");
}

void Collectives::allreduce(std::vector<double>& values, PL_ReduceOp op) const {
  if (world_ == 1 || values.empty()) return;
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = values.data();
  t.dtype = PL_F64;
  t.device = {PL_DEVICE_CPU, 0};
  t.numel = static_cast<int64_t>(values.size());
  t.ndim = 1;
  t.shape[0] = t.numel;
  if (strategy_ && strategy_->has_reduce()) return strategy_->reduce(t, op);
  if (!group_) no_route("reduce");
  run("collective.allreduce", [&](PL_Work** w) { return api_->allreduce(group_, &t, op, w); });
}

void Collectives::allgather(const PL_Tensor& input, std::vector<PL_Tensor>& outputs) const {
  if (strategy_ && strategy_->has_all_gather()) return strategy_->all_gather(input, outputs);
  if (!group_) no_route("all_gather");
  run("collective.allgather",
      [&](PL_Work** w) { return api_->allgather(group_, &input, outputs.data(), outputs.size(), w); });
}

std::vector<std::string> Collectives::allgather(const std::string& bytes) const {
  if (world_ == 1) return {bytes};
  // Sizes first (i64 each), then the bytes with per-rank sizes.
  std::vector<int64_t> sizes(static_cast<size_t>(world_));
  int64_t mine = static_cast<int64_t>(bytes.size());
  auto flat = [](void* p, PL_DType dt, int64_t n) {
    PL_Tensor t{};
    t.struct_size = sizeof t;
    t.data = p;
    t.dtype = dt;
    t.device = {PL_DEVICE_CPU, 0};
    t.numel = n;
    t.ndim = 1;
    t.shape[0] = n;
    return t;
  };
  PL_Tensor in = flat(&mine, PL_I64, 1);
  std::vector<PL_Tensor> outs;
  for (auto& s : sizes) outs.push_back(flat(&s, PL_I64, 1));
  allgather(in, outs);
  std::vector<std::string> result(static_cast<size_t>(world_));
  std::string copy = bytes;  // the input must be writable memory in the descriptor
  PL_Tensor bin = flat(copy.data(), PL_U8, mine);
  outs.clear();
  for (size_t r = 0; r < result.size(); ++r) {
    result[r].resize(static_cast<size_t>(sizes[r]));
    outs.push_back(flat(result[r].data(), PL_U8, sizes[r]));
  }
  allgather(bin, outs);
  return result;
}

void EpochAccumulator::add(const Scalar& value, double w) {
  pending.emplace_back(value, w);
  if (pending.size() >= kMaxPending) fold();
}

void EpochAccumulator::fold() {
  for (const auto& [value, w] : pending) {
    const double x = value.value();
    weighted_sum += x * w;
    weight += w;
    sum += x;
    min = std::min(min, x);
    max = std::max(max, x);
  }
  pending.clear();
}

void MetricLog::log(const std::string& name, const Scalar& value, const LogOptions& o, int64_t batch_size,
                    bool in_training_step, int rank, const Collectives& c) {
  if (name.empty()) throw Error(PL_ERR_INVALID_ARGUMENT, "log: the metric name is empty");
  if (o.rank_zero_only && o.sync_dist)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name +
                                             "'): rank_zero_only and sync_dist exclude each other (a value logged "
                                             "on rank 0 alone cannot be reduced across ranks)");
  if (o.rank_zero_only && rank != 0) return;
  bool on_step = o.on_step.value_or(in_training_step);
  bool on_epoch = o.on_epoch.value_or(!in_training_step);
  if (!on_step && !on_epoch)
    throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "'): on_step and on_epoch are both false: nothing to log");
  if (o.prog_bar && std::find(prog_bar_.begin(), prog_bar_.end(), name) == prog_bar_.end()) prog_bar_.push_back(name);
  if (on_step) {
    Scalar v = value;
    if (o.sync_dist && c.world_size() > 1) {
      std::vector<double> x{value.value()};
      PL_ReduceOp op = o.reduce_fx == Reduce::Min   ? PL_REDUCE_MIN
                       : o.reduce_fx == Reduce::Max ? PL_REDUCE_MAX
                                                    : PL_REDUCE_SUM;
      c.allreduce(x, op);
      v = o.reduce_fx == Reduce::Mean ? x[0] / c.world_size() : x[0];
    }
    step_[on_epoch ? name + "_step" : name] = v;
  }
  if (on_epoch) {
    if (batch_size < 1)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "log('" + name + "'): batch_size " + std::to_string(batch_size) + " must be >= 1");
    auto& a = epoch_[on_step ? name + "_epoch" : name];
    a.reduce = o.reduce_fx;
    a.sync = a.sync || o.sync_dist;
    a.add(value, static_cast<double>(batch_size));
  }
}

void MetricLog::log_metric(const std::string& name, Metric& metric, const LogOptions& o) {
  if (name.empty()) throw Error(PL_ERR_INVALID_ARGUMENT, "log: the metric name is empty");
  auto [it, fresh] = metrics_.emplace(name, &metric);
  if (!fresh && it->second != &metric)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "log('" + name + "', ...) was given two different metrics in one epoch; use one name per metric");
  if (o.prog_bar && std::find(prog_bar_.begin(), prog_bar_.end(), name) == prog_bar_.end()) prog_bar_.push_back(name);
}

std::map<std::string, Scalar> MetricLog::take_step_values() {
  std::map<std::string, Scalar> out;
  out.swap(step_);
  return out;
}

namespace {

double local_value(const EpochAccumulator& a) {
  switch (a.reduce) {
    case Reduce::Mean:
      return a.weight > 0 ? a.weighted_sum / a.weight : std::nan("");
    case Reduce::Sum:
      return a.sum;
    case Reduce::Min:
      return a.min;
    case Reduce::Max:
      return a.max;
  }
  return std::nan("");
}

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::Mean:
      return "mean";
    case Reduce::Sum:
      return "sum";
    case Reduce::Min:
      return "min";
    case Reduce::Max:
      return "max";
  }
  return "?";
}

}  // namespace

std::map<std::string, double> MetricLog::reduce_epoch(const Collectives& c) {
  std::map<std::string, double> out;
  std::map<std::string, EpochAccumulator> acc;
  acc.swap(epoch_);
  for (auto& [name, a] : acc) a.fold();
  std::map<std::string, Metric*> metrics;
  metrics.swap(metrics_);
  // A metric logged from steps: computed over every rank's states (a rank without it sends
  // none), then reset for the next epoch.
  const CollectivesSync sync(c);
  auto compute = [&](const std::string& name) {
    auto it = metrics.find(name);
    if (it == metrics.end()) {
      c.allgather(std::string());
      return;
    }
    out[name] = it->second->compute(sync);
    it->second->reset();
  };
  if (c.world_size() == 1) {
    for (const auto& [name, a] : acc) out[name] = local_value(a);
    for (const auto& [name, m] : metrics) compute(name);
    return out;
  }
  // Ranks may have logged different names (a rank without validation batches logs nothing), so
  // the synced names are agreed on first: the union, each with its reduction ("metric": a
  // pl::Metric logged from steps).
  std::string mine;
  for (const auto& [name, a] : acc)
    if (a.sync) mine += name + '\t' + reduce_name(a.reduce) + '\n';
  for (const auto& [name, m] : metrics) mine += name + "\tmetric\n";
  std::map<std::string, std::string> synced;  // name -> reduction
  for (const auto& text : c.allgather(mine)) {
    std::istringstream is(text);
    std::string line;
    while (std::getline(is, line)) {
      auto tab = line.find('\t');
      std::string name = line.substr(0, tab), red = line.substr(tab + 1);
      auto [it, fresh] = synced.emplace(name, red);
      if (!fresh && it->second != red)
        throw Error(PL_ERR_INVALID_ARGUMENT, "log('" + name + "', sync_dist=True): ranks reduce it differently ('" +
                                                 it->second + "' and '" + red + "')");
    }
  }
  std::vector<double> sums, mins, maxs;
  for (const auto& [name, red] : synced) {
    if (red == "metric") continue;
    auto it = acc.find(name);
    const EpochAccumulator* a = it == acc.end() ? nullptr : &it->second;
    if (red == "mean") {
      sums.push_back(a ? a->weighted_sum : 0.0);
      sums.push_back(a ? a->weight : 0.0);
    } else if (red == "sum") {
      sums.push_back(a ? a->sum : 0.0);
    } else if (red == "min") {
      mins.push_back(a ? a->min : std::numeric_limits<double>::infinity());
    } else {
      maxs.push_back(a ? a->max : -std::numeric_limits<double>::infinity());
    }
  }
  c.allreduce(sums, PL_REDUCE_SUM);
  c.allreduce(mins, PL_REDUCE_MIN);
  c.allreduce(maxs, PL_REDUCE_MAX);
  size_t si = 0, mi = 0, xi = 0;
  for (const auto& [name, red] : synced) {
    if (red == "metric") continue;
    if (red == "mean") {
      double ws = sums[si++], w = sums[si++];
      out[name] = w > 0 ? ws / w : std::nan("");
    } else if (red == "sum") {
      out[name] = sums[si++];
    } else if (red == "min") {
      out[name] = mins[mi++];
    } else {
      out[name] = maxs[xi++];
    }
  }
  for (const auto& [name, a] : acc)
    if (!a.sync) out[name] = local_value(a);
  for (const auto& [name, red] : synced)
    if (red == "metric") compute(name);  // in name order on every rank
  return out;
}

void CsvLog::add_row(int64_t epoch, int64_t step, const std::map<std::string, double>& values) {
  if (values.empty()) return;
  auto row = values;
  row["epoch"] = static_cast<double>(epoch);
  row["step"] = static_cast<double>(step);
  rows_.push_back(std::move(row));
}

void CsvLog::open_existing(const std::string& path, int64_t before_step) {
  path_ = path;
  rows_.clear();
  std::string text;
  try {
    text = pl::read_file(path);
  } catch (const Error& e) {
    if (e.code() == PL_ERR_NOT_FOUND) return;
    throw;
  }
  std::istringstream in(text);
  std::string line, cell;
  std::vector<std::string> cols;
  if (!std::getline(in, line)) return;
  for (std::istringstream h(line); std::getline(h, cell, ',');) cols.push_back(cell);
  while (std::getline(in, line)) {
    std::map<std::string, double> row;
    std::istringstream r(line);
    for (size_t i = 0; i < cols.size() && std::getline(r, cell, ','); ++i)
      if (!cell.empty()) row[cols[i]] = std::strtod(cell.c_str(), nullptr);
    auto st = row.find("step");
    if (st != row.end() && st->second < static_cast<double>(before_step)) rows_.push_back(std::move(row));
  }
}

void CsvLog::flush() const {
  if (path_.empty()) return;
  std::set<std::string> names;
  for (const auto& r : rows_)
    for (const auto& kv : r) names.insert(kv.first);
  std::vector<std::string> cols{"epoch", "step"};
  for (const auto& n : names)
    if (n != "epoch" && n != "step") cols.push_back(n);
  std::ostringstream os;
  for (size_t i = 0; i < cols.size(); ++i) os << (i ? "," : "") << cols[i];
  os << "\n";
  char buf[64];
  for (const auto& r : rows_) {
    for (size_t i = 0; i < cols.size(); ++i) {
      if (i) os << ",";
      auto it = r.find(cols[i]);
      if (it == r.end()) continue;
      if (i < 2)
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(it->second));
      else
        std::snprintf(buf, sizeof buf, "%.9g", it->second);
      os << buf;
    }
    os << "\n";
  }
  write_file_atomic(path_, os.str());
}

}  // namespace plrt::sdk
