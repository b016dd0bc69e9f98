// OptimizerShards: optimizer state reassembled from element-range pieces for the ranges one rank
// wants (see optimizer_shards.hpp), and read_optimizer_files, its run over a checkpoint's files.
#include "optimizer_shards.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <set>
#include <system_error>
#include <utility>

namespace plrt::sdk {

namespace {

std::string range_text(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string g17(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

bool parse_state_key(const std::string& key, StateKey* out) {
  static const std::string prefix = "state.";
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  const char* p = key.data() + prefix.size();
  const char* last = key.data() + key.size();
  StateKey k;
  auto a = std::from_chars(p, last, k.param);
  if (a.ec != std::errc() || a.ptr == p || a.ptr == last || *a.ptr != '.') return false;
  p = a.ptr + 1;
  if (p < last && *p >= '0' && *p <= '9') {  // "<begin>-<end>.<field>"
    auto b = std::from_chars(p, last, k.begin);
    if (b.ec != std::errc() || b.ptr == last || *b.ptr != '-') return false;
    auto e = std::from_chars(b.ptr + 1, last, k.end);
    if (e.ec != std::errc() || e.ptr == b.ptr + 1 || e.ptr == last || *e.ptr != '.') return false;
    k.whole = false;
    p = e.ptr + 1;
  }
  if (p == last) return false;
  k.field.assign(p, last);
  *out = std::move(k);
  return true;
}

std::string optimizer_rank_file(int rank) { return "optimizer.rank" + std::to_string(rank) + ".safetensors"; }

OptimizerShards::OptimizerShards(std::string checkpoint, std::vector<ShardParam> params,
                                 std::vector<pl::ParamRange> wanted)
    : checkpoint_(std::move(checkpoint)), params_(std::move(params)), by_param_(params_.size()) {
  for (const pl::ParamRange& r : wanted) {
    if (r.param >= params_.size())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "OptimizerShards: a wanted range names parameter " +
                                                   std::to_string(r.param) + " of " + std::to_string(params_.size()));
    int64_t numel = 1;
    for (int64_t d : params_[r.param].shape) numel *= d;
    if (r.begin < 0 || r.begin > r.end || r.end > numel)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "OptimizerShards: wanted range " + range_text(r.begin, r.end) +
                                                   " is not inside " + param_text(r.param) + " (numel " +
                                                   std::to_string(numel) + ")");
    if (r.begin == r.end) continue;
    by_param_[r.param].push_back(wanted_.size());
    wanted_.push_back(r);
  }
  for (auto& list : by_param_) {
    std::sort(list.begin(), list.end(), [&](size_t a, size_t b) { return wanted_[a].begin < wanted_[b].begin; });
    for (size_t j = 1; j < list.size(); ++j)
      if (wanted_[list[j - 1]].end > wanted_[list[j]].begin)
        throw pl::Error(PL_ERR_INVALID_ARGUMENT, "OptimizerShards: wanted ranges " +
                                                     range_text(wanted_[list[j - 1]].begin, wanted_[list[j - 1]].end) +
                                                     " and " +
                                                     range_text(wanted_[list[j]].begin, wanted_[list[j]].end) + " of " +
                                                     param_text(wanted_[list[j]].param) + " overlap");
  }
}

std::string OptimizerShards::where() const { return "checkpoint " + checkpoint_; }

std::string OptimizerShards::files_text() const {
  std::string s;
  for (const auto& f : files_) s += (s.empty() ? "" : ", ") + f;
  return s.empty() ? "none" : s;
}

std::string OptimizerShards::param_text(size_t i) const {
  return "parameter " + std::to_string(i) + " (" + (params_[i].name.empty() ? "?" : params_[i].name) + ")";
}

std::vector<size_t> OptimizerShards::overlapping(size_t param, int64_t begin, int64_t end) const {
  const auto& list = by_param_[param];
  // the first wanted range that ends after `begin` (they are sorted and disjoint)
  auto it = std::partition_point(list.begin(), list.end(), [&](size_t w) { return wanted_[w].end <= begin; });
  std::vector<size_t> out;
  for (; it != list.end() && wanted_[*it].begin < end; ++it) out.push_back(*it);
  return out;
}

void OptimizerShards::add(const std::string& file, const std::map<std::string, pl::Tensor>& tensors,
                          const std::map<std::string, double>& range_scalars) {
  const size_t f = files_.size();
  files_.push_back(file);
  const std::string in = where() + ": " + file + " ";
  // The piece a name stands for, checked against the parameters.
  auto piece = [&](const std::string& key) {
    StateKey k;
    if (!parse_state_key(key, &k))
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, in + "has '" + key +
                                                   "', which is not an optimizer state name (state.<i>.<field> or "
                                                   "state.<i>.<begin>-<end>.<field>)");
    if (k.param >= params_.size())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, in + "has '" + key + "' for parameter " + std::to_string(k.param) +
                                                   " but the optimizer has " + std::to_string(params_.size()) +
                                                   " parameters (is it the same model?)");
    int64_t numel = 1;
    for (int64_t d : params_[k.param].shape) numel *= d;
    if (k.whole) {
      k.begin = 0;
      k.end = numel;
    } else if (k.begin < 0 || k.begin >= k.end || k.end > numel) {
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, in + "has '" + key + "', elements " + range_text(k.begin, k.end) +
                                                   ", which do not fit " + param_text(k.param) + " of " +
                                                   std::to_string(numel) + " elements");
    }
    return k;
  };
  for (const auto& [key, t] : tensors) {
    const StateKey k = piece(key);
    const ShardParam& p = params_[k.param];
    const int64_t n = k.end - k.begin;
    if (!t.defined() || t.dtype() != p.dtype || t.numel() != n)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      in + "has '" + key + "' as " +
                          (t.defined() ? std::string(pl_dtype_name(t.dtype())) + " " + pl::shape_text(t.shape())
                                       : std::string("an undefined tensor")) +
                          " but " + param_text(k.param) + " needs " + pl_dtype_name(p.dtype) + " with " +
                          std::to_string(n) + " elements there (its shape " + pl::shape_text(p.shape) +
                          "; is it the same model?)");
    const std::vector<size_t> hits = overlapping(k.param, k.begin, k.end);
    if (hits.empty()) continue;
    const pl::Tensor host = t.to_host();
    const size_t elem = pl_dtype_size(p.dtype);
    for (size_t w : hits) {
      const pl::ParamRange& r = wanted_[w];
      Slot& s = tensors_[{w, k.field}];
      if (!s.data.defined()) s.data = pl::Tensor::empty({r.end - r.begin}, p.dtype);
      const int64_t lo = std::max(r.begin, k.begin), hi = std::min(r.end, k.end);
      std::memcpy(static_cast<char*>(s.data.data()) + static_cast<size_t>(lo - r.begin) * elem,
                  static_cast<const char*>(host.data()) + static_cast<size_t>(lo - k.begin) * elem,
                  static_cast<size_t>(hi - lo) * elem);
      s.covers.push_back({lo, hi, f, key, 0});
    }
  }
  for (const auto& [key, v] : range_scalars) {
    const StateKey k = piece(key);
    for (size_t w : overlapping(k.param, k.begin, k.end)) {
      const pl::ParamRange& r = wanted_[w];
      scalars_[{w, k.field}].covers.push_back({std::max(r.begin, k.begin), std::min(r.end, k.end), f, key, v});
    }
  }
}

// Every wanted range of `param` that has `field` somewhere must have it for all its elements, from
// exactly one piece each; a scalar's pieces must agree within a wanted range.
void OptimizerShards::check_field(size_t param, const std::string& field, bool scalar) {
  auto& slots = scalar ? scalars_ : tensors_;
  const std::string what = where() + ": the optimizer shards do not add up: " + param_text(param) + " " +
                           (scalar ? "scalar " : "field ") + field + " ";
  for (size_t w : by_param_[param]) {
    const pl::ParamRange& r = wanted_[w];
    auto it = slots.find({w, field});
    std::vector<Cover> covers = it == slots.end() ? std::vector<Cover>{} : it->second.covers;
    std::sort(covers.begin(), covers.end(), [](const Cover& a, const Cover& b) { return a.begin < b.begin; });
    int64_t at = r.begin;
    for (size_t j = 0; j < covers.size(); ++j) {
      const Cover& c = covers[j];
      if (c.begin < at) {
        const Cover& prev = covers[j - 1];
        throw pl::Error(PL_ERR_INVALID_ARGUMENT, what + "has elements " + range_text(c.begin, std::min(at, c.end)) +
                                                     " twice: in " + files_[prev.file] + " ('" + prev.key +
                                                     "') and in " + files_[c.file] + " ('" + c.key + "')");
      }
      if (c.begin > at)
        throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                        what + "has elements " + range_text(at, c.begin) + " in no file (files: " + files_text() + ")");
      if (scalar && c.value != covers[0].value)
        throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                        where() + ": the optimizer shards disagree: " + param_text(param) + " scalar " + field +
                            " is " + g17(covers[0].value) + " in " + files_[covers[0].file] + " ('" + covers[0].key +
                            "') but " + g17(c.value) + " in " + files_[c.file] + " ('" + c.key + "'), for elements " +
                            range_text(r.begin, r.end) + " that this rank keeps together");
      at = c.end;
    }
    if (at < r.end)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      what + "has elements " + range_text(at, r.end) + " in no file (files: " + files_text() + ")");
  }
}

OptimizerState OptimizerShards::finish() {
  // Each (parameter, field) seen in any wanted range: checked over every wanted range of it.
  std::set<std::pair<size_t, std::string>> fields, scalar_fields;
  for (const auto& [k, s] : tensors_) fields.emplace(wanted_[k.first].param, k.second);
  for (const auto& [k, s] : scalars_) scalar_fields.emplace(wanted_[k.first].param, k.second);
  for (const auto& [param, field] : fields) check_field(param, field, false);
  for (const auto& [param, field] : scalar_fields) check_field(param, field, true);
  OptimizerState out;
  out.scalars = global_;
  auto name = [&](size_t w, const std::string& field) {
    const pl::ParamRange& r = wanted_[w];
    const ShardParam& p = params_[r.param];
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    const bool whole = r.begin == 0 && r.end == numel;
    return std::make_pair("state." + std::to_string(r.param) + "." +
                              (whole ? "" : std::to_string(r.begin) + "-" + std::to_string(r.end) + ".") + field,
                          whole);
  };
  for (auto& [k, s] : tensors_) {
    auto [key, whole] = name(k.first, k.second);
    out.tensors[key] = whole ? s.data.reshape(params_[wanted_[k.first].param].shape) : s.data;
  }
  for (auto& [k, s] : scalars_) out.scalars[name(k.first, k.second).first] = s.covers.at(0).value;
  tensors_.clear();
  scalars_.clear();
  return out;
}

namespace {

// One optimizer file of checkpoint `dir`, checked: it exists, parses, was written by
// `optimizer_name`, and (rank file `rank` of `world`, rank >= 0) names that rank and world size.
struct OptimizerFile {
  std::map<std::string, pl::Tensor> tensors;
  std::map<std::string, double> global, ranged;  // scalars: "lr", "step" / "state.…"
};
OptimizerFile read_one(const std::string& dir, const std::string& name, const std::string& optimizer_name, int rank,
                       int world) {
  const std::string path = dir + "/" + name;
  const std::string in = "checkpoint " + dir + ": " + name;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "checkpoint " + dir + " lacks " + name +
                        (rank >= 0 ? " (trainer.json says each of its " + std::to_string(world) +
                                         " ranks wrote its optimizer state: " + optimizer_rank_file(0) + " to " +
                                         optimizer_rank_file(world - 1) + ")"
                                   : std::string()));
  pl::safetensors::File file;
  try {
    file = pl::safetensors::load(path);
  } catch (const pl::Error& e) {
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, in + " is damaged: " + e.what());
  }
  auto meta = [&](const char* key) {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string() : it->second;
  };
  const std::string saved = meta(kOptimizerNameKey);
  if (saved != optimizer_name)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, in + " holds " + (saved.empty() ? "no" : saved) +
                                                 " optimizer state but configure_optimizers made " + optimizer_name);
  if (rank >= 0 && (meta(kShardRankKey) != std::to_string(rank) || meta(kShardWorldKey) != std::to_string(world)))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, in + " says it is rank '" + meta(kShardRankKey) + "' of '" +
                                                 meta(kShardWorldKey) + "' but it should be rank " +
                                                 std::to_string(rank) + " of " + std::to_string(world) +
                                                 " (a file from another checkpoint?)");
  OptimizerFile out;
  for (const auto& [k, x] : optimizer_scalars(file.metadata, in))
    (k.rfind("state.", 0) == 0 ? out.ranged : out.global)[k] = x;
  out.tensors = std::move(file.tensors);
  return out;
}

}  // namespace

std::map<std::string, double> optimizer_scalars(const std::map<std::string, std::string>& metadata,
                                                const std::string& source) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : metadata) {
    if (k == kOptimizerNameKey || k == kShardRankKey || k == kShardWorldKey) continue;
    double x = 0;
    auto res = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || res.ec != std::errc() || res.ptr != v.data() + v.size())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      source + " is damaged: its scalar '" + k + "' is '" + v + "', not a number");
    out[k] = x;
  }
  return out;
}

OptimizerState read_optimizer_file(const std::string& dir, const std::string& file, const std::string& optimizer_name) {
  OptimizerFile f = read_one(dir, file, optimizer_name, -1, 0);
  OptimizerState out;
  out.tensors = std::move(f.tensors);
  out.scalars = std::move(f.global);
  out.scalars.insert(f.ranged.begin(), f.ranged.end());
  return out;
}

OptimizerState read_optimizer_files(const std::string& dir, const std::vector<std::string>& files,
                                    const std::string& optimizer_name, std::vector<ShardParam> params,
                                    std::vector<pl::ParamRange> wanted) {
  OptimizerShards shards(dir, std::move(params), std::move(wanted));
  const int world = static_cast<int>(files.size());
  for (int r = 0; r < world; ++r) {
    const std::string& name = files[static_cast<size_t>(r)];
    OptimizerFile f = read_one(dir, name, optimizer_name, name == optimizer_rank_file(r) ? r : -1, world);
    if (r == 0) shards.set_global_scalars(f.global);
    shards.add(name, f.tensors, f.ranged);  // f (one file) is freed before the next is read
  }
  return shards.finish();
}

}  // namespace plrt::sdk
