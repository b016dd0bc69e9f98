// pl::Module: registration, dotted enumeration, placement and the state dict.
#include <algorithm>
#include <cmath>
#include <plrt/sdk/module.hpp>
#include <set>
#include <sstream>

#include "sdk_internal.hpp"

namespace pl {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

using plrt::sdk::describe;
using plrt::sdk::num;

bool same_device(PL_Device a, PL_Device b) { return a.type == b.type && a.index == b.index; }

// A value moved to (acc, device): the same storage when it already lives there.
Tensor placed(const Tensor& t, const Accelerator& acc, PL_Device device) {
  if (!t.defined() || (same_device(t.device(), device) && (device.type == PL_DEVICE_CPU || t.accelerator() == acc)))
    return t;
  return t.to(acc, device);
}

void place_parameter(Parameter& p, const Accelerator& acc, PL_Device device) {
  p.value = placed(p.value, acc, device);
  if (p.grad.defined()) p.grad = placed(p.grad, acc, device);
  // A gradient that no longer matches its value (a value replaced by hand) is made anew.
  if (p.requires_grad &&
      (!p.grad.defined() || p.grad.shape() != p.value.shape() || p.grad.dtype() != p.value.dtype())) {
    p.grad = Tensor::zeros(acc, device, p.value.shape(), p.value.dtype());
    p.grad_is_zero = true;
  }
}

}  // namespace

Module::~Module() {
  if (parent_ != nullptr) {
    auto& siblings = parent_->children_;
    siblings.erase(std::remove_if(siblings.begin(), siblings.end(), [this](const auto& c) { return c.second == this; }),
                   siblings.end());
  }
  for (auto& c : children_) c.second->parent_ = nullptr;
}

Module* Module::root() {
  Module* m = this;
  while (m->parent_ != nullptr) m = m->parent_;
  return m;
}

const Module* Module::root() const {
  const Module* m = this;
  while (m->parent_ != nullptr) m = m->parent_;
  return m;
}

void Module::check_name(const std::string& name) const {
  if (name.empty())
    throw Error(PL_ERR_INVALID_ARGUMENT, "Module: a parameter, buffer or submodule name must not be empty");
  if (name.find('.') != std::string::npos)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Module: name '" + name +
                                             "' contains '.'; dots separate the levels of a "
                                             "dotted path, so a name must not contain one");
  const char* kind = nullptr;
  for (const auto& p : params_)
    if (p.first == name) kind = "parameter";
  for (const auto& b : buffers_)
    if (b.first == name) kind = "buffer";
  for (const auto& c : children_)
    if (c.first == name) kind = "submodule";
  if (kind != nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Module: name '" + name + "' is already registered (as a " + kind +
                                             "); names must be unique within a module");
}

Parameter& Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_name(name);
  if (!value.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "Module::register_parameter('" + name + "'): the value is an undefined tensor");
  Parameter p;
  p.value = std::move(value);
  p.requires_grad = requires_grad;
  const Module* r = root();
  if (r->acc_.defined()) place_parameter(p, r->acc_, r->device_);
  params_.emplace_back(name, std::move(p));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  check_name(name);
  if (!value.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT, "Module::register_buffer('" + name + "'): the value is an undefined tensor");
  const Module* r = root();
  if (r->acc_.defined()) value = placed(value, r->acc_, r->device_);
  buffers_.emplace_back(name, std::move(value));
  return buffers_.back().second;
}

void Module::register_module(const std::string& name, Module& child) {
  check_name(name);
  if (child.parent_ != nullptr)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "Module::register_module('" + name +
                    "'): the module is already registered in another module; a module has one parent");
  for (const Module* m = this; m != nullptr; m = m->parent_)
    if (m == &child)
      throw Error(PL_ERR_INVALID_ARGUMENT, "Module::register_module('" + name +
                                               "'): the module is this module or one of its ancestors (a cycle)");
  child.parent_ = this;
  children_.emplace_back(name, &child);
  const Module* r = root();
  if (r->acc_.defined()) child.place_tree(r->acc_, r->device_);
}

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out) {
  for (auto& p : params_) out.emplace_back(join(prefix, p.first), &p.second);
  for (auto& c : children_) c.second->collect_parameters(join(prefix, c.first), out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& b : buffers_) out.emplace_back(join(prefix, b.first), &b.second);
  for (auto& c : children_) c.second->collect_buffers(join(prefix, c.first), out);
}

void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) {
  for (auto& p : params_) out.emplace_back(join(prefix, p.first), p.second.value);
  for (auto& b : buffers_) out.emplace_back(join(prefix, b.first), b.second);
  for (auto& c : children_) c.second->collect_state(join(prefix, c.first), out);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  collect_parameters("", out);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_buffers("", out);
  return out;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& np : named_parameters()) out.push_back(np.second);
  return out;
}

void Module::place_tree(const Accelerator& acc, PL_Device device) {
  for (auto& p : params_) place_parameter(p.second, acc, device);
  for (auto& b : buffers_) b.second = placed(b.second, acc, device);
  for (auto& c : children_) c.second->place_tree(acc, device);
}

void Module::to(const Accelerator& acc, PL_Device device) {
  if (!acc.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "Module::to: the accelerator is an empty handle; create one with "
                "pl::Accelerator(runtime, name)");
  if (device.type != acc.device_type())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "Module::to: accelerator '" + acc.name() + "' has no device of type " + std::to_string(device.type));
  Module* r = root();
  r->place_tree(acc, device);
  r->acc_ = acc;
  r->device_ = device;
}

const Accelerator& Module::accelerator() const { return root()->acc_; }
PL_Device Module::device() const { return root()->device_; }

void Module::train(bool on) { root()->training_ = on; }
bool Module::training() const { return root()->training_; }

void Module::zero_grad() {
  for (auto& np : named_parameters()) np.second->grad_is_zero = true;
}

void Module::requires_grad_(bool on) {
  for (auto& np : named_parameters()) np.second->requires_grad = on;
  const Module* r = root();
  if (!on || !r->acc_.defined()) return;
  const Accelerator acc = r->acc_;  // copies: to() assigns the root's
  const PL_Device device = r->device_;
  to(acc, device);
}

double Module::grad_scale() const { return root()->grad_scale_; }

void Module::set_grad_scale(double scale) {
  if (!(scale > 0) || !std::isfinite(scale))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "Module::set_grad_scale: " + num(scale) + " is invalid; it must be finite and > 0");
  root()->grad_scale_ = scale;
}

void Module::grad_ready(Parameter& p) {
  Module* r = root();
  if (r->grad_ready_hook_) r->grad_ready_hook_(p);
}

void Module::set_grad_ready_hook(std::function<void(Parameter&)> hook) { root()->grad_ready_hook_ = std::move(hook); }

std::vector<std::pair<std::string, Tensor>> Module::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_state("", out);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> targets;
  for (auto& np : named_parameters()) targets.emplace_back(np.first, &np.second->value);
  for (auto& nb : named_buffers()) targets.push_back(nb);

  std::vector<std::string> missing, mismatched;
  std::set<std::string> known;
  for (const auto& [name, dst] : targets) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined() || src.shape() != dst->shape() || src.dtype() != dst->dtype())
      mismatched.push_back("'" + name + "': the module has " + describe(*dst) + ", the state " +
                           (src.defined() ? describe(src) : std::string("an undefined tensor")));
  }
  std::vector<std::string> unexpected;
  for (const auto& kv : state)
    if (!known.count(kv.first)) unexpected.push_back(kv.first);

  std::string problems;
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!mismatched.empty()) problems += " shape/dtype mismatch: " + list(mismatched) + ".";
  if (strict && !missing.empty()) problems += " missing keys: " + list(missing) + ".";
  if (strict && !unexpected.empty()) problems += " unexpected keys: " + list(unexpected) + ".";
  if (!problems.empty())
    throw Error(PL_ERR_INVALID_ARGUMENT,
                std::string("Module::load_state_dict") + (strict ? " (strict)" : "") + ":" + problems);
  for (auto& [name, dst] : targets) {
    auto it = state.find(name);
    if (it != state.end()) dst->copy_from(it->second);
  }
}

}  // namespace pl
