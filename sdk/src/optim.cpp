// pl::SGD, pl::Adam, pl::AdamW over the accelerator's sgd_step / adam_step kernels, and their
// checkpoint state; whole-parameter steps and range steps (a strategy's optimizer_step).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <plrt/sdk/optim.hpp>
#include <set>
#include <system_error>

#include "sdk_internal.hpp"

namespace pl {

namespace {

using plrt::sdk::num;

using plrt::sdk::describe;

void require(bool ok, const std::string& who, const std::string& what, double v, const char* valid) {
  if (!ok) throw Error(PL_ERR_INVALID_ARGUMENT, who + ": " + what + " " + num(v) + " is invalid; " + valid);
}

void check_lr(const std::string& who, double lr) {
  require(std::isfinite(lr) && lr >= 0, who, "lr", lr, "it must be finite and >= 0");
}

// A whole number >= lo held in a double (checkpoint scalars are doubles).
int64_t whole_number(double v, const std::string& who, const std::string& key, int64_t lo) {
  if (!std::isfinite(v) || v != std::trunc(v) || v < static_cast<double>(lo) || v > 0x1p62)
    throw Error(PL_ERR_INVALID_ARGUMENT, who + ": scalar '" + key + "' = " + num(v) +
                                             " is invalid; it must be a whole "
                                             "number >= " +
                                             std::to_string(lo));
  return static_cast<int64_t>(v);
}

}  // namespace

// ---- Optimizer ----

Optimizer::Optimizer(std::vector<Parameter*> params, double lr) : params_(std::move(params)), lr_(lr) {
  check_lr("Optimizer", lr);
  std::set<const Parameter*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i] == nullptr)
      throw Error(PL_ERR_INVALID_ARGUMENT, "Optimizer: parameter " + std::to_string(i) + " is a null pointer");
    if (!seen.insert(params_[i]).second)
      throw Error(PL_ERR_INVALID_ARGUMENT, "Optimizer: parameter " + std::to_string(i) +
                                               " appears more than once; each parameter may be given once");
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (Parameter* p : params_) p->grad_is_zero = true;
}

void Optimizer::set_lr(double lr) {
  check_lr(name() + "::set_lr", lr);
  lr_ = lr;
}

std::vector<std::pair<std::string, std::string>> Optimizer::hyperparameters() const { return {{"lr", num(lr_)}}; }

double Optimizer::momentum() const {
  throw Error(PL_ERR_UNSUPPORTED, name() + " has no momentum (SGD's momentum or Adam's beta1) to read or cycle");
}

void Optimizer::set_momentum(double) { (void)momentum(); }

std::map<std::string, double> Optimizer::state_scalars() const {
  return {{"lr", lr_}, {"step", static_cast<double>(steps_)}};
}

const Accelerator& Optimizer::accelerator_of(size_t i) const {
  const Parameter& p = *params_[i];
  if (p.grad.defined() && p.grad.accelerator().defined()) return p.grad.accelerator();
  if (p.value.accelerator().defined()) return p.value.accelerator();
  throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": parameter " + std::to_string(i) +
                                           " has no accelerator; place its module with module.to(accelerator, device) "
                                           "before stepping");
}

void Optimizer::step() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (takes_step(i)) update(i, 0, params_[i]->value.numel());
  finish_updates();
  ++steps_;
}

void Optimizer::step(const std::vector<ParamRange>& ranges) {
  // Everything is checked before the first update.
  const std::string who = name() + "::step(ranges): ";
  auto text = [](size_t k, const ParamRange& r) {
    return "range " + std::to_string(k) + " (parameter " + std::to_string(r.param) + ", elements [" +
           std::to_string(r.begin) + ", " + std::to_string(r.end) + "))";
  };
  std::vector<size_t> order;
  for (size_t k = 0; k < ranges.size(); ++k) {
    const ParamRange& r = ranges[k];
    if (r.param >= params_.size())
      throw Error(PL_ERR_INVALID_ARGUMENT, who + text(k, r) +
                                               " names a parameter this optimizer does not have; valid: 0 to " +
                                               std::to_string(params_.size()) + " - 1");
    const int64_t numel = params_[r.param]->value.numel();
    if (r.begin < 0 || r.begin > r.end || r.end > numel)
      throw Error(PL_ERR_INVALID_ARGUMENT, who + text(k, r) +
                                               " is not inside the parameter: it needs 0 <= begin <= end <= " +
                                               std::to_string(numel) + " (its numel)");
    if (!params_[r.param]->requires_grad)
      throw Error(PL_ERR_INVALID_ARGUMENT, who + text(k, r) +
                                               " names a frozen parameter (requires_grad false); only "
                                               "trainable parameters are stepped");
    if (r.begin < r.end) order.push_back(k);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(ranges[a].param, ranges[a].begin) < std::tie(ranges[b].param, ranges[b].begin);
  });
  for (size_t j = 1; j < order.size(); ++j) {
    const ParamRange &a = ranges[order[j - 1]], &b = ranges[order[j]];
    if (a.param == b.param && a.end > b.begin)
      throw Error(PL_ERR_INVALID_ARGUMENT, who + text(order[j - 1], a) + " and " + text(order[j], b) +
                                               " overlap; each element may be stepped once");
  }
  for (const ParamRange& r : ranges)
    if (r.begin < r.end && takes_step(r.param)) update(r.param, r.begin, r.end);
  finish_updates();
  ++steps_;
}

PL_Tensor Optimizer::flat_view(const Tensor& t, int64_t begin, int64_t end) {
  return plrt::sdk::flat_range(t, begin, end);
}

std::string Optimizer::range_prefix(const RangeKey& k) {
  return "state." + std::to_string(std::get<0>(k)) + "." + std::to_string(std::get<1>(k)) + "-" +
         std::to_string(std::get<2>(k)) + ".";
}

Tensor Optimizer::load_range_tensor(const RangeKey& k, const std::string& key, const Tensor& src) const {
  const size_t i = std::get<0>(k);
  const Tensor& value = params_[i]->value;
  const int64_t n = std::get<2>(k) - std::get<1>(k);
  if (!src.defined() || src.shape() != Shape{n} || src.dtype() != value.dtype())
    throw Error(PL_ERR_INVALID_ARGUMENT, name() + "::load_state: '" + key + "' is " +
                                             (src.defined() ? describe(src) : std::string("undefined")) +
                                             " but range [" + std::to_string(std::get<1>(k)) + ", " +
                                             std::to_string(std::get<2>(k)) + ") of parameter " + std::to_string(i) +
                                             " needs " + pl_dtype_name(value.dtype()) + " [" + std::to_string(n) + "]");
  Tensor t = Tensor::empty(accelerator_of(i), value.device(), {n}, value.dtype());
  t.copy_from(src);
  return t;
}

bool Optimizer::takes_step(size_t i) const {
  const Parameter& p = *params_[i];
  if (!p.requires_grad || p.grad_is_zero) return false;
  if (!p.grad.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": parameter " + std::to_string(i) +
                                             " is marked as having a gradient (grad_is_zero false) but its grad tensor "
                                             "is undefined");
  return true;
}

Tensor Optimizer::load_tensor(size_t i, const std::string& key, const Tensor& src) const {
  const Tensor& value = params_[i]->value;
  if (!src.defined() || src.shape() != value.shape() || src.dtype() != value.dtype())
    throw Error(PL_ERR_INVALID_ARGUMENT, name() + "::load_state: '" + key + "' is " +
                                             (src.defined() ? describe(src) : std::string("undefined")) +
                                             " but parameter " + std::to_string(i) + " is " + describe(value));
  // Own storage: the caller's tensors (perhaps another optimizer's live state) stay untouched.
  Tensor t = Tensor::empty(accelerator_of(i), value.device(), value.shape(), value.dtype());
  t.copy_from(src);
  return t;
}

size_t Optimizer::state_index(const std::string& key, const std::vector<std::string>& fields, std::string* field,
                              RangeKey* range) const {
  std::string valid;
  for (const auto& f : fields) valid += (valid.empty() ? "" : ", ") + ("state.<i>." + f);
  const std::string bad = name() + "::load_state: unexpected name '" + key + "'; valid: " + valid + " with i in [0, " +
                          std::to_string(params_.size()) + ")" +
                          (range != nullptr ? " (a partial range's: state.<i>.<begin>-<end>.<name>)" : "");
  const std::string prefix = "state.";
  if (key.compare(0, prefix.size(), prefix) != 0) throw Error(PL_ERR_INVALID_ARGUMENT, bad);
  const size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) throw Error(PL_ERR_INVALID_ARGUMENT, bad);
  size_t index = 0;
  const auto r = std::from_chars(key.data() + prefix.size(), key.data() + dot, index);
  if (r.ec != std::errc() || r.ptr != key.data() + dot || index >= params_.size())
    throw Error(PL_ERR_INVALID_ARGUMENT, bad);
  *field = key.substr(dot + 1);
  if (range != nullptr) {
    *range = RangeKey{index, -1, -1};
    const char* p = key.data() + dot + 1;
    const char* last = key.data() + key.size();
    if (p < last && *p >= '0' && *p <= '9') {  // "<begin>-<end>.<field>"
      int64_t begin = 0, end = 0;
      auto a = std::from_chars(p, last, begin);
      if (a.ec != std::errc() || a.ptr == last || *a.ptr != '-') throw Error(PL_ERR_INVALID_ARGUMENT, bad);
      auto b = std::from_chars(a.ptr + 1, last, end);
      if (b.ec != std::errc() || b.ptr == last || *b.ptr != '.') throw Error(PL_ERR_INVALID_ARGUMENT, bad);
      const int64_t numel = params_[index]->value.numel();
      if (begin < 0 || begin >= end || end > numel || (begin == 0 && end == numel))
        throw Error(PL_ERR_INVALID_ARGUMENT,
                    name() + "::load_state: '" + key + "' names elements [" + std::to_string(begin) + ", " +
                        std::to_string(end) +
                        ") but a partial "
                        "range of parameter " +
                        std::to_string(index) + " needs 0 <= begin < end <= " + std::to_string(numel) +
                        ", not the whole parameter (that is state." + std::to_string(index) + ".<name>)");
      *range = RangeKey{index, begin, end};
      *field = std::string(b.ptr + 1, last);
    }
  }
  for (const auto& f : fields)
    if (*field == f) return index;
  throw Error(PL_ERR_INVALID_ARGUMENT, bad);
}

Optimizer::Scalars Optimizer::read_scalars(const std::map<std::string, double>& scalars) const {
  Scalars s{lr_, steps_, {}};
  for (const auto& [key, v] : scalars) {
    if (key == "lr") {
      check_lr(name() + "::load_state", v);
      s.lr = v;
    } else if (key == "step") {
      s.steps = whole_number(v, name() + "::load_state", key, 0);
    } else {
      s.rest[key] = v;
    }
  }
  return s;
}

// ---- SGD ----

SGD::SGD(std::vector<Parameter*> params, SgdOptions o) : Optimizer(std::move(params), o.lr), o_(o) {
  require(std::isfinite(o.momentum) && o.momentum >= 0, "SGD", "momentum", o.momentum, "it must be finite and >= 0");
  require(std::isfinite(o.dampening), "SGD", "dampening", o.dampening, "it must be finite");
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "SGD", "weight_decay", o.weight_decay,
          "it must be finite and >= 0");
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error(PL_ERR_INVALID_ARGUMENT, "SGD: nesterov needs momentum > 0 and dampening == 0 (momentum " +
                                             num(o.momentum) + ", dampening " + num(o.dampening) + ")");
  momentum_.resize(params_.size());
}

void SGD::update(size_t i, int64_t begin, int64_t end) {
  Parameter& p = *params_[i];
  const Accelerator& acc = accelerator_of(i);
  const bool all = whole(i, begin, end);
  PL_SgdParams sp{};
  sp.struct_size = sizeof sp;
  sp.lr = lr_;
  sp.momentum = o_.momentum;
  sp.dampening = o_.dampening;
  sp.weight_decay = o_.weight_decay;
  sp.nesterov = o_.nesterov ? 1 : 0;
  PL_Tensor pv = all ? p.value.view() : flat_view(p.value, begin, end);
  PL_Tensor gv = all ? p.grad.view() : flat_view(p.grad, begin, end), mv{};
  if (o_.momentum != 0) {
    // The kernel initialises the buffer on the first step (torch: buf = d.clone()).
    Tensor& buf = all ? momentum_[i] : range_momentum_[RangeKey{i, begin, end}];
    sp.first_step = buf.defined() ? 0 : 1;
    if (!buf.defined())
      buf = all ? Tensor::empty(acc, p.value.device(), p.value.shape(), p.value.dtype())
                : Tensor::empty(acc, p.value.device(), {end - begin}, p.value.dtype());
    mv = buf.view();
  }
  acc.sgd_step(pv, gv, o_.momentum != 0 ? &mv : nullptr, sp);
}

std::vector<std::pair<std::string, Tensor>> SGD::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) out.emplace_back("state." + std::to_string(i) + ".momentum_buffer", momentum_[i]);
  for (const auto& [k, t] : range_momentum_) out.emplace_back(range_prefix(k) + "momentum_buffer", t);
  return out;
}

std::map<std::string, double> SGD::state_scalars() const { return Optimizer::state_scalars(); }

void SGD::load_state(const std::map<std::string, Tensor>& tensors, const std::map<std::string, double>& scalars) {
  std::vector<Tensor> next(params_.size());
  std::map<RangeKey, Tensor> ranges;
  std::string field;
  for (const auto& [key, t] : tensors) {
    RangeKey k;
    const size_t i = state_index(key, {"momentum_buffer"}, &field, &k);
    if (std::get<1>(k) < 0)
      next[i] = load_tensor(i, key, t);
    else
      ranges[k] = load_range_tensor(k, key, t);
  }
  const Scalars s = read_scalars(scalars);
  if (!s.rest.empty())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "SGD::load_state: unexpected scalar '" + s.rest.begin()->first + "'; SGD's scalars are lr and step");
  momentum_ = std::move(next);
  range_momentum_ = std::move(ranges);
  lr_ = s.lr;
  steps_ = s.steps;
}

// ---- Adam / AdamW ----

void SGD::set_momentum(double momentum) {
  require(std::isfinite(momentum) && momentum >= 0, "SGD::set_momentum", "momentum", momentum,
          "it must be finite and >= 0");
  if (o_.nesterov && momentum <= 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, "SGD::set_momentum: nesterov needs momentum > 0 (got " + num(momentum) + ")");
  o_.momentum = momentum;
}

void Adam::set_momentum(double beta1) {
  require(beta1 >= 0 && beta1 < 1, name() + "::set_momentum", "beta1", beta1, "it must be in [0, 1)");
  o_.beta1 = beta1;
}

Adam::Adam(std::vector<Parameter*> params, AdamOptions o, bool decoupled)
    : Optimizer(std::move(params), o.lr), o_(o), decoupled_(decoupled) {
  const std::string who = decoupled ? "AdamW" : "Adam";
  require(o.beta1 >= 0 && o.beta1 < 1, who, "beta1", o.beta1, "it must be in [0, 1)");
  require(o.beta2 >= 0 && o.beta2 < 1, who, "beta2", o.beta2, "it must be in [0, 1)");
  require(std::isfinite(o.eps) && o.eps >= 0, who, "eps", o.eps, "it must be finite and >= 0");
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, who, "weight_decay", o.weight_decay,
          "it must be finite and >= 0");
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  step_.assign(params_.size(), 0);
}

void Adam::update(size_t i, int64_t begin, int64_t end) {
  Parameter& p = *params_[i];
  const Accelerator& acc = accelerator_of(i);
  const bool all = whole(i, begin, end);
  RangeState* rs = all ? nullptr : &range_state_[RangeKey{i, begin, end}];
  Tensor& m = all ? exp_avg_[i] : rs->exp_avg;
  Tensor& v = all ? exp_avg_sq_[i] : rs->exp_avg_sq;
  int64_t& count = all ? step_[i] : rs->step;
  if (!m.defined()) {
    const Shape shape = all ? p.value.shape() : Shape{end - begin};
    m = Tensor::zeros(acc, p.value.device(), shape, p.value.dtype());
    v = Tensor::zeros(acc, p.value.device(), shape, p.value.dtype());
  }
  PL_AdamParams ap{};
  ap.struct_size = sizeof ap;
  ap.lr = lr_;
  ap.beta1 = o_.beta1;
  ap.beta2 = o_.beta2;
  ap.eps = o_.eps;
  ap.weight_decay = o_.weight_decay;
  ap.step = count + 1;  // counted once the update went through
  ap.decoupled_weight_decay = decoupled_ ? 1 : 0;
  adjust(ap, i);
  PL_Tensor pv = all ? p.value.view() : flat_view(p.value, begin, end);
  PL_Tensor gv = all ? p.grad.view() : flat_view(p.grad, begin, end), mv = m.view(), vv = v.view();
  acc.adam_step(pv, gv, mv, vv, ap);
  count = ap.step;
}

std::vector<std::pair<std::string, std::string>> Adam::hyperparameters() const {
  return {{"lr", num(lr_)},
          {"beta1", num(o_.beta1)},
          {"beta2", num(o_.beta2)},
          {"eps", num(o_.eps)},
          {"weight_decay", num(o_.weight_decay)},
          {"decoupled_weight_decay", decoupled_ ? "true" : "false"}};
}

std::vector<std::pair<std::string, Tensor>> Adam::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    out.emplace_back("state." + std::to_string(i) + ".exp_avg", exp_avg_[i]);
    out.emplace_back("state." + std::to_string(i) + ".exp_avg_sq", exp_avg_sq_[i]);
  }
  for (const auto& [k, rs] : range_state_) {
    if (!rs.exp_avg.defined()) continue;
    out.emplace_back(range_prefix(k) + "exp_avg", rs.exp_avg);
    out.emplace_back(range_prefix(k) + "exp_avg_sq", rs.exp_avg_sq);
  }
  return out;
}

std::map<std::string, double> Adam::state_scalars() const {
  auto out = Optimizer::state_scalars();
  for (size_t i = 0; i < params_.size(); ++i)
    if (step_[i] > 0) out["state." + std::to_string(i) + ".step"] = static_cast<double>(step_[i]);
  for (const auto& [k, rs] : range_state_)
    if (rs.step > 0) out[range_prefix(k) + "step"] = static_cast<double>(rs.step);
  return out;
}

void Adam::load_state(const std::map<std::string, Tensor>& tensors, const std::map<std::string, double>& scalars) {
  const size_t n = params_.size();
  std::vector<Tensor> m(n), v(n);
  std::vector<int64_t> steps(n, 0);
  std::map<RangeKey, RangeState> ranges;
  std::string field;
  for (const auto& [key, t] : tensors) {
    RangeKey k;
    const size_t i = state_index(key, {"exp_avg", "exp_avg_sq"}, &field, &k);
    if (std::get<1>(k) < 0)
      (field == "exp_avg" ? m : v)[i] = load_tensor(i, key, t);
    else
      (field == "exp_avg" ? ranges[k].exp_avg : ranges[k].exp_avg_sq) = load_range_tensor(k, key, t);
  }
  const Scalars s = read_scalars(scalars);
  for (const auto& [key, value] : s.rest) {
    RangeKey k;
    const size_t i = state_index(key, {"step"}, &field, &k);
    (std::get<1>(k) < 0 ? steps[i] : ranges[k].step) = whole_number(value, name() + "::load_state", key, 1);
  }
  for (const auto& [k, rs] : ranges)
    if (!rs.exp_avg.defined() || !rs.exp_avg_sq.defined() || rs.step <= 0) {
      const std::string p = range_prefix(k);
      std::string missing = !rs.exp_avg.defined()      ? p + "exp_avg"
                            : !rs.exp_avg_sq.defined() ? p + "exp_avg_sq"
                                                       : p + "step (a scalar)";
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  name() + "::load_state: a range has part of its state; '" + missing + "' is missing");
    }
  // A parameter's state is all three pieces or none.
  for (size_t i = 0; i < n; ++i) {
    const bool any = m[i].defined() || v[i].defined() || steps[i] > 0;
    const bool all = m[i].defined() && v[i].defined() && steps[i] > 0;
    if (any && !all) {
      const std::string p = "state." + std::to_string(i) + ".";
      std::string missing = !m[i].defined()   ? p + "exp_avg"
                            : !v[i].defined() ? p + "exp_avg_sq"
                                              : p + "step (a scalar)";
      throw Error(PL_ERR_INVALID_ARGUMENT, name() + "::load_state: parameter " + std::to_string(i) +
                                               " has part of its state; '" + missing + "' is missing");
    }
  }
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
  step_ = std::move(steps);
  range_state_ = std::move(ranges);
  lr_ = s.lr;
  steps_ = s.steps;
}

}  // namespace pl
