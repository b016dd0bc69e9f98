// ZeroRedundancyOptimizer: this rank's optimizer over its partition of the parameters, and the
// values shared after each step (torch.hpp has the two partitions and their rules).
//
// Whole parameters (ddp, bagua, horovod, no DDP): PyTorch's greedy partition (largest first, to the
// rank with the fewest elements so far; ties to the lowest rank), then from each owner its large
// parameters broadcast in place and its small ones packed into one broadcast per dtype.
//
// Element ranges (ddp_sharded): the strategy's owned ranges; the local optimizer steps tensors made
// with from_blob over those elements of each parameter and of its registered gradient memory (which
// holds the ranks' mean of its shard after backward), so no copy is made and the state is 1/W; the
// strategy's optimizer_step gathers the values afterwards.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <type_traits>

#include "ddp_impl.hpp"

namespace pl::torch {

struct ZeroCore::Impl {
  std::vector<::torch::Tensor> params;
  DdpCore::Impl* ddp = nullptr;  // the DDP that registered the parameters, if any
  bool sharded = false;
  int rank = 0, world = 1;
  std::vector<int> owner;                   // whole partition: each parameter's rank
  std::vector<::torch::Tensor> owned;       // what the local optimizer steps
  std::vector<int64_t> owned_param;         // sharded: owned[k]'s index in ddp->params
  std::vector<::torch::Tensor> owned_grad;  // sharded: owned[k]'s gradient (a view of grad_mem)
  std::unique_ptr<::torch::optim::Optimizer> local;
  MakeLocal make;
  MakeState make_state;

  std::vector<std::string> owned_names() const;  // each owned tensor's name in a partition archive
  int64_t owned_begin(size_t k) const;           // sharded: owned[k]'s first element in its parameter
  void load_ranges(const std::vector<std::string>& files);
  void partition_whole();
  void make_shards();
  void broadcast_from_owners();
  void step_local();
  [[noreturn]] static void bad(const std::string& why) {
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "ZeroRedundancyOptimizer: " + why);
  }
};

namespace {

// A tensor over `count` elements of `base` from element `begin` (no copy; `base` must outlive it).
::torch::Tensor elements(const ::torch::Tensor& base, int64_t begin, int64_t count) {
  auto* data = static_cast<char*>(base.data_ptr()) + begin * static_cast<int64_t>(base.element_size());
  return ::torch::from_blob(data, {count}, base.options().requires_grad(false));
}

}  // namespace

void ZeroCore::Impl::partition_whole() {
  std::vector<size_t> order(params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> sizes(static_cast<size_t>(world), 0);
  owner.assign(params.size(), 0);
  for (size_t i : order) {
    const auto r = static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    owner[i] = static_cast<int>(r);
    sizes[r] += params[i].numel();
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (owner[i] == rank) owned.push_back(params[i]);
}

void ZeroCore::Impl::make_shards() {
  std::vector<bool> given(ddp->params.size(), false);
  for (const auto& p : params) given[static_cast<size_t>(ddp->param_of(p))] = true;
  for (size_t i = 0; i < given.size(); ++i)
    if (!given[i])
      bad("strategy '" + ddp->sync->job().strategy + "' shards every trainable parameter of the module, but '" +
          ddp->params[i].name + "' was not given; give the module's parameters (ddp.module()->parameters())");
  for (const pl::ParamRange& r : ddp->sync->owned_ranges()) {
    int64_t k = -1;
    for (size_t i = 0; i < ddp->params.size(); ++i)
      if (ddp->params[i].index == r.param) k = static_cast<int64_t>(i);
    if (k < 0 || r.end <= r.begin) continue;
    auto& p = ddp->params[static_cast<size_t>(k)];
    ::torch::Tensor shard = elements(p.value, r.begin, r.end - r.begin);
    shard.requires_grad_(true);
    ::torch::Tensor grad = elements(p.grad_mem, r.begin, r.end - r.begin);
    shard.mutable_grad() = grad;
    owned.push_back(shard);
    owned_param.push_back(k);
    owned_grad.push_back(grad);
  }
}

ZeroCore::ZeroCore(std::vector<::torch::Tensor> params, const MakeLocal& make) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const Job& j = job();
  m.rank = j.rank, m.world = j.world_size;
  if (params.empty()) Impl::bad("got an empty parameter list");
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (!p.defined() || !p.requires_grad() || !p.is_contiguous() || p.device() != j.device)
      Impl::bad("parameter " + std::to_string(i) + " is " +
                (!p.defined()         ? std::string("undefined")
                 : !p.requires_grad() ? std::string("frozen (requires_grad false)")
                 : !p.is_contiguous() ? std::string("not contiguous")
                                      : "on " + p.device().str() + ", not " + j.device.str()) +
                "; give trainable, contiguous parameters on the job's device");
    for (size_t k = 0; k < i; ++k)
      if (params[k].is_same(p)) Impl::bad("parameter " + std::to_string(i) + " is given twice");
  }
  m.params = std::move(params);
  {
    detail::State& st = detail::state();
    std::lock_guard<std::recursive_mutex> lock(st.m);
    for (DdpCore::Impl* d : st.ddps) {
      size_t found = 0;
      for (const auto& p : m.params) found += d->param_of(p) >= 0 ? 1 : 0;
      if (found == 0) continue;
      if (found != m.params.size())
        Impl::bad(std::to_string(m.params.size() - found) + " of the " + std::to_string(m.params.size()) +
                  " parameters are not " + d->who + "'s; give one module's parameters");
      m.ddp = d;
    }
  }
  m.sharded = m.ddp != nullptr && m.ddp->shards;
  if (m.sharded)
    m.make_shards();
  else
    m.partition_whole();
  if (!m.owned.empty()) m.local = make(m.owned);
  m.make = make;
}

ZeroCore::~ZeroCore() = default;

void ZeroCore::Impl::broadcast_from_owners() {
  auto g = detail::group();
  if (!g) return;
  ::torch::NoGradGuard no_grad;
  // Per owner: each large parameter in place (no packing copy), the small ones packed into one
  // broadcast per dtype (a broadcast costs a round trip, so many small ones would be latency).
  constexpr int64_t kSmallBytes = 1 << 20;
  for (int r = 0; r < world; ++r) {
    std::map<::torch::ScalarType, std::vector<::torch::Tensor>> small;  // by dtype, in parameter order
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner[i] != r) continue;
      if (params[i].numel() * static_cast<int64_t>(params[i].element_size()) >= kSmallBytes) {
        detail::TensorView v(params[i]);
        g->broadcast(v.get(), r);
      } else {
        small[params[i].scalar_type()].push_back(params[i]);
      }
    }
    for (auto& [type, list] : small) {
      ::torch::Tensor flat;
      if (rank == r) {
        std::vector<::torch::Tensor> parts;
        for (const auto& p : list) parts.push_back(p.detach().reshape({-1}));
        flat = ::torch::cat(parts);
      } else {
        int64_t total = 0;
        for (const auto& p : list) total += p.numel();
        flat = ::torch::empty({total}, list.front().options().requires_grad(false));
      }
      detail::TensorView v(flat);
      g->broadcast(v.get(), r);
      if (rank == r) continue;
      int64_t at = 0;
      for (auto& p : list) {
        p.detach().copy_(flat.narrow(0, at, p.numel()).view_as(p));
        at += p.numel();
      }
    }
  }
}

void ZeroCore::Impl::step_local() {
  if (!local) return;
  if (!sharded) {
    local->step();
    return;
  }
  // A parameter no rank used (find_unused_parameters) has no gradient, as with PyTorch's DDP: the
  // optimizer skips its shard this step.
  const std::vector<int32_t>& used = ddp->global_used;
  for (size_t k = 0; k < owned.size(); ++k)
    if (!used.empty() && !used[static_cast<size_t>(owned_param[k])]) owned[k].mutable_grad() = ::torch::Tensor();
  try {
    local->step();
  } catch (...) {
    for (size_t k = 0; k < owned.size(); ++k) owned[k].mutable_grad() = owned_grad[k];
    throw;
  }
  for (size_t k = 0; k < owned.size(); ++k) owned[k].mutable_grad() = owned_grad[k];
}

void ZeroCore::step() {
  Impl& m = *impl_;
  if (m.ddp == nullptr) {
    m.step_local();
    m.broadcast_from_owners();
    return;
  }
  m.ddp->sync->optimizer_step([&](const std::vector<pl::ParamRange>&) {
    m.step_local();
    if (!m.sharded) m.broadcast_from_owners();  // ddp_sharded: the strategy gathers after this
  });
  m.ddp->stepped = true;
}

void ZeroCore::zero_grad(bool set_to_none) {
  ::torch::NoGradGuard no_grad;
  for (auto& p : impl_->params) {
    if (set_to_none)
      p.mutable_grad() = ::torch::Tensor();
    else if (p.grad().defined())
      p.mutable_grad().zero_();
  }
}

::torch::optim::Optimizer& ZeroCore::local() {
  if (!impl_->local)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "ZeroRedundancyOptimizer: rank " + std::to_string(impl_->rank) +
                                                 " owns no parameter (" + std::to_string(impl_->params.size()) +
                                                 " parameters over " + std::to_string(impl_->world) + " ranks)");
  return *impl_->local;
}

namespace {

using StateMap = std::decay_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>;

// The key under which an optimizer keeps a tensor's state (a string of its TensorImpl's address in
// libtorch 1.x, the address itself in later versions).
template <class Key>
Key key_of(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, std::string>)
    return c10::guts::to_string(impl);
  else
    return reinterpret_cast<Key>(impl);
}

StateMap::key_type state_key(const ::torch::Tensor& t) { return key_of<StateMap::key_type>(t.unsafeGetTensorImpl()); }

// Reads the states named `names[k]` from every archive in `files` into `opt`'s state for
// `targets[k]`; returns how many were found.
size_t load_states(::torch::optim::Optimizer& opt, const std::vector<::torch::Tensor>& targets,
                   const std::vector<std::string>& names, const std::vector<std::string>& files,
                   const ZeroCore::MakeState& make_state) {
  std::vector<bool> done(targets.size(), false);
  size_t found = 0;
  for (const std::string& bytes : files) {
    ::torch::serialize::InputArchive in;
    std::istringstream is(bytes);
    in.load_from(is, job().device);
    for (size_t k = 0; k < targets.size(); ++k) {
      ::torch::serialize::InputArchive sub;
      if (done[k] || !in.try_read(names[k], sub)) continue;
      auto state = make_state();
      state->serialize(sub);
      opt.state()[state_key(targets[k])] = std::move(state);
      done[k] = true;
      ++found;
    }
  }
  return found;
}

}  // namespace

void ZeroCore::set_state_factory(MakeState make) { impl_->make_state = std::move(make); }

int64_t ZeroCore::Impl::owned_begin(size_t k) const {
  const auto& p = ddp->params[static_cast<size_t>(owned_param[k])];
  return (static_cast<char*>(owned[k].data_ptr()) - static_cast<char*>(p.value.data_ptr())) /
         static_cast<int64_t>(p.value.element_size());
}

std::vector<std::string> ZeroCore::Impl::owned_names() const {
  std::vector<std::string> names;
  if (sharded) {
    for (size_t k = 0; k < owned.size(); ++k) {
      const int64_t begin = owned_begin(k);
      names.push_back("s" + std::to_string(owned_param[k]) + "_" + std::to_string(begin) + "_" +
                      std::to_string(begin + owned[k].numel()));
    }
    return names;
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (owner[i] == rank) names.push_back("p" + std::to_string(i));
  return names;
}

std::string ZeroCore::save_partition() const {
  const Impl& m = *impl_;
  ::torch::serialize::OutputArchive root;
  if (m.local) {
    const std::vector<std::string> names = m.owned_names();
    auto& states = m.local->state();
    for (size_t k = 0; k < m.owned.size(); ++k) {
      auto it = states.find(state_key(m.owned[k]));
      if (it == states.end()) continue;  // never stepped (no gradient yet): no state
      ::torch::serialize::OutputArchive sub;
      it->second->serialize(sub);
      root.write(names[k], sub);
    }
  }
  std::ostringstream os;
  root.save_to(os);
  return os.str();
}

void ZeroCore::load_partitions(const std::vector<std::string>& files) {
  Impl& m = *impl_;
  if (!m.make_state)
    throw pl::Error(PL_ERR_UNSUPPORTED,
                    "ZeroRedundancyOptimizer: this optimizer type's per-parameter state is not known to plrt::torch "
                    "(SGD, Adam, AdamW, RMSprop, Adagrad are), so its partitions cannot be loaded");
  if (!m.local) return;
  m.local->state().clear();
  if (m.sharded)
    m.load_ranges(files);
  else
    load_states(*m.local, m.owned, m.owned_names(), files, m.make_state);
}

namespace {

// A saved element range "s<param>_<begin>_<end>" of a ddp_sharded partition, and its state's
// fields (as the optimizer's ParamState wrote them: tensors of the range's length, scalars).
struct SavedRange {
  int64_t param = -1, begin = 0, end = 0;
  std::vector<std::pair<std::string, c10::IValue>> fields;
};

bool parse_range(const std::string& key, SavedRange& r) {
  long long p = 0, b = 0, e = 0;
  char tail = 0;
  if (key.empty() || key[0] != 's' || std::sscanf(key.c_str(), "s%lld_%lld_%lld%c", &p, &b, &e, &tail) != 3)
    return false;
  r.param = p;
  r.begin = b;
  r.end = e;
  return p >= 0 && 0 <= b && b < e;
}

}  // namespace

// ddp_sharded's state, saved as element ranges by a world of any size: each range this rank owns
// now is assembled from the saved ranges that overlap it, a tensor field of the saved range's length
// element by element, any other field (Adam's step: every rank steps alike) from the first one.
void ZeroCore::Impl::load_ranges(const std::vector<std::string>& files) {
  std::map<int64_t, std::vector<SavedRange>> saved;  // by index in ddp->params
  for (const std::string& bytes : files) {
    ::torch::serialize::InputArchive in;
    std::istringstream is(bytes);
    in.load_from(is, job().device);
    for (const std::string& key : in.keys()) {
      SavedRange r;
      ::torch::serialize::InputArchive sub;
      if (!parse_range(key, r) || !in.try_read(key, sub)) continue;
      for (const std::string& field : sub.keys()) {
        c10::IValue v;
        if (sub.try_read(field, v)) r.fields.emplace_back(field, std::move(v));
      }
      saved[r.param].push_back(std::move(r));
    }
  }
  const std::vector<std::string> names = owned_names();
  for (size_t k = 0; k < owned.size(); ++k) {
    const auto& p = ddp->params[static_cast<size_t>(owned_param[k])];
    const int64_t begin = owned_begin(k), end = begin + owned[k].numel();
    std::vector<const SavedRange*> parts;
    for (const SavedRange& r : saved[owned_param[k]])
      if (r.begin < end && begin < r.end) parts.push_back(&r);
    if (parts.empty()) continue;  // never stepped when saved (no gradient yet): no state
    ::torch::serialize::OutputArchive out;
    for (const auto& [field, value] : parts.front()->fields) {
      if (!value.isTensor() || value.toTensor().numel() != parts.front()->end - parts.front()->begin) {
        out.write(field, value);
        continue;
      }
      ::torch::Tensor t = ::torch::empty({end - begin}, value.toTensor().options());
      int64_t covered = 0;
      for (const SavedRange* r : parts) {
        auto it = std::find_if(r->fields.begin(), r->fields.end(), [&](const auto& f) { return f.first == field; });
        if (it == r->fields.end() || !it->second.isTensor()) continue;
        const int64_t lo = std::max(begin, r->begin), hi = std::min(end, r->end);
        t.narrow(0, lo - begin, hi - lo).copy_(it->second.toTensor().reshape({-1}).narrow(0, lo - r->begin, hi - lo));
        covered += hi - lo;
      }
      if (covered != end - begin)
        bad("the checkpoint holds " + std::to_string(covered) + " of the " + std::to_string(end - begin) +
            " elements of '" + field + "' for " + names[k] + " (parameter '" + p.name +
            "'): a rank's partition file is missing or from another checkpoint");
      out.write(field, c10::IValue(t));
    }
    std::ostringstream os;
    out.save_to(os);
    std::istringstream is(os.str());
    ::torch::serialize::InputArchive in;
    in.load_from(is, job().device);
    auto state = make_state();
    state->serialize(in);
    local->state()[state_key(owned[k])] = std::move(state);
  }
}

std::unique_ptr<::torch::optim::Optimizer> ZeroCore::consolidate(int to) {
  Impl& m = *impl_;
  if (to < 0 || to >= m.world)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "ZeroRedundancyOptimizer::consolidate_state_dict: to=" + std::to_string(to) +
                        " is not a rank (valid: 0 to " + std::to_string(m.world - 1) + ")");
  if (m.sharded)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "ZeroRedundancyOptimizer::consolidate_state_dict: under ddp_sharded the state is split inside "
                    "parameters (element ranges); save a checkpoint instead (each rank writes its part)");
  if (!m.make_state)
    throw pl::Error(PL_ERR_UNSUPPORTED,
                    "ZeroRedundancyOptimizer::consolidate_state_dict: this optimizer type's per-parameter state is "
                    "not known to plrt::torch (SGD, Adam, AdamW, RMSprop, Adagrad are)");
  const std::vector<std::string> parts = detail::gather_bytes(save_partition(), to);
  if (m.rank != to) return nullptr;
  auto all = m.make(m.params);
  std::vector<std::string> names;
  for (size_t i = 0; i < m.params.size(); ++i) names.push_back("p" + std::to_string(i));
  load_states(*all, m.params, names, parts, m.make_state);
  return all;
}

const std::vector<::torch::Tensor>& ZeroCore::owned() const { return impl_->owned; }
bool ZeroCore::sharded() const { return impl_->sharded; }

}  // namespace pl::torch
