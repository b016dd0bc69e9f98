// A torch::optim optimizer as a pl::Optimizer: its checkpoint state (torch_optimizer.hpp's
// "State"): by name for libtorch's five optimizers, the torch::save archive for another class.
#include <cmath>
#include <cstring>
#include <sstream>

#include "tensor_bridge.hpp"
#include "torch_optimizer.hpp"
#include "torch_optimizer_kinds.hpp"

namespace pl::torch::detail {

std::vector<std::pair<std::string, pl::Tensor>> TorchOptimizer::state_tensors() const {
  std::vector<std::pair<std::string, pl::Tensor>> out;
  if (kind_ == Kind::kOther) {
    ::torch::serialize::OutputArchive archive;
    opt_->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    const std::string s = bytes.str();
    pl::Tensor t = pl::Tensor::empty({static_cast<int64_t>(s.size())}, PL_U8);
    if (!s.empty()) std::memcpy(t.data(), s.data(), s.size());
    out.emplace_back(kArchiveKey, t);
    return out;
  }
  for (size_t i = 0; i < torch_params_.size(); ++i) {
    auto it = opt_->state().find(state_key(torch_params_[i]));
    if (it == opt_->state().end()) continue;
    for (auto& [field, t] : fields_of(kind_, *it->second).tensors)
      out.emplace_back("state." + std::to_string(i) + "." + field, borrow(t, accelerator_of(i)));
  }
  for (const auto& [k, r] : ranges_) {
    auto it = shard_->state().find(state_key(r.value));
    if (it == shard_->state().end()) continue;
    for (auto& [field, t] : fields_of(kind_, *it->second).tensors)
      out.emplace_back(range_prefix(k) + field, borrow(t, accelerator_of(std::get<0>(k))));
  }
  return out;
}

std::map<std::string, double> TorchOptimizer::state_scalars() const {
  std::map<std::string, double> out{{"lr", lr()}, {"step", static_cast<double>(steps())}};
  if (!has_step(kind_)) return out;
  for (size_t i = 0; i < torch_params_.size(); ++i) {
    auto it = opt_->state().find(state_key(torch_params_[i]));
    if (it != opt_->state().end())
      out["state." + std::to_string(i) + ".step"] = static_cast<double>(fields_of(kind_, *it->second).step);
  }
  for (const auto& [k, r] : ranges_) {
    auto it = shard_->state().find(state_key(r.value));
    if (it != shard_->state().end())
      out[range_prefix(k) + "step"] = static_cast<double>(fields_of(kind_, *it->second).step);
  }
  return out;
}

void TorchOptimizer::load_state(const std::map<std::string, pl::Tensor>& tensors,
                                const std::map<std::string, double>& scalars) {
  const Scalars s = read_scalars(scalars);
  if (auto it = tensors.find(kArchiveKey); it != tensors.end()) {
    if (tensors.size() != 1 || !s.rest.empty())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "the optimizer state of " + name_ + " has '" + kArchiveKey +
                                                   "' (a torch::save archive) beside other names; it holds either "
                                                   "the archive alone or state.<i>.<field> names");
    load_archive(it->second);
  } else if (kind_ == Kind::kOther) {
    if (!tensors.empty())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "the optimizer state has '" + tensors.begin()->first + "'; " + name_ +
                                                   " (a torch::optim optimizer of another class than SGD, Adam, "
                                                   "AdamW, RMSprop and Adagrad) is saved as '" +
                                                   kArchiveKey + "'");
  } else {
    load_named(tensors, s.rest);
  }
  set_lr(s.lr);
  steps_ = s.steps;
}

void TorchOptimizer::load_archive(const pl::Tensor& bytes) {
  const pl::Tensor host = bytes.to_host();
  std::istringstream in(std::string(static_cast<const char*>(host.data()), host.nbytes()));
  ::torch::serialize::InputArchive archive;
  archive.load_from(in);
  opt_->load(archive);
}

// Every name, shape and step is checked before any state changes.
void TorchOptimizer::load_named(const std::map<std::string, pl::Tensor>& tensors,
                                const std::map<std::string, double>& rest) {
  std::map<RangeKey, std::map<std::string, ::torch::Tensor>> fields;  // (i, -1, -1): a whole parameter
  std::map<RangeKey, int64_t> steps;
  std::string field;
  for (const auto& [key, t] : tensors) {
    RangeKey k;
    const size_t i = state_index(key, field_names(kind_), &field, &k);
    fields[k][field] = to_torch(std::get<1>(k) < 0 ? load_tensor(i, key, t) : load_range_tensor(k, key, t));
  }
  for (const auto& [key, v] : rest) {
    RangeKey k;
    if (!has_step(kind_))
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      name_ + "::load_state: unexpected scalar '" + key + "'; its scalars are lr and step");
    state_index(key, {"step"}, &field, &k);
    if (!(v >= 0 && v == std::floor(v) && v < 9e15))
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, name_ + "::load_state: '" + key + "' is " + std::to_string(v) +
                                                   "; a step count is an integer >= 0");
    steps[k] = static_cast<int64_t>(v);
  }
  std::vector<std::pair<RangeKey, std::unique_ptr<::torch::optim::OptimizerParamState>>> made;
  for (const auto& [k, f] : fields) {
    const std::string who = name_ + "::load_state: the state of " +
                            (std::get<1>(k) < 0 ? "state." + std::to_string(std::get<0>(k)) + "." : range_prefix(k));
    auto st = steps.find(k);
    if (has_step(kind_) && st == steps.end()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, who + " has no 'step'");
    made.emplace_back(k, make_state(kind_, f, st == steps.end() ? 0 : st->second, who));
  }
  for (auto& [k, state] : made) {
    const size_t i = std::get<0>(k);
    if (std::get<1>(k) < 0) {
      opt_->state()[state_key(torch_params_[i])] = std::move(state);
    } else {
      const std::string key = state_key(range(k).value);  // range() makes shard_ on first use
      shard_->state()[key] = std::move(state);
    }
  }
}

}  // namespace pl::torch::detail
