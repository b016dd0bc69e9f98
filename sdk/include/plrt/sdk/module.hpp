// pl::Module: parameters, buffers and submodules registered by name (PyTorch's nn.Module habits).
// Registered tensors follow the module: Module::to moves every parameter, gradient and buffer to a
// device, so that user code never moves tensors by hand.  Names are PyTorch-style dotted paths
// ("layers.0.weight"), so state_dict() loads into the same PyTorch model.
//
// A module tree has one root (the module no other module registered).  Placement (accelerator,
// device), training mode, grad_scale and the grad_ready hook are the root's: a submodule reads
// them from its root, and setting them through any module of the tree sets the root's.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl {

struct Parameter {
  Tensor value;
  Tensor grad;  // allocated by Module::to (same device, shape and dtype as value)
  // false: frozen (torch's p.requires_grad_(False)): the layers write no gradient, optimizers do
  // not step it, state_dict and checkpoints still hold it.  Freeze before Trainer::fit: the
  // strategy learns each parameter's kind (trainable, frozen, buffer) when fit sets it up.
  bool requires_grad = true;
  // Set by zero_grad (PyTorch's set_to_none): the next backward writes the gradient instead of
  // adding to it, and an optimizer skips a parameter whose gradient was never written.
  bool grad_is_zero = true;
};

class Module {
 public:
  Module() = default;
  // Detaches from the parent and from the children, so that either may outlive the other.
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (normally in the constructor) ----
  // Names are non-empty, contain no '.', and are unique among this module's parameters, buffers
  // and children (else pl::Error naming the name).  Registering into a tree that was already
  // placed with to() places the new tensors too.
  Parameter& register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor value);
  // `child` must outlive this module (usually a member of it), be a root, and not be this module
  // or one of its ancestors.
  void register_module(const std::string& name, Module& child);

  // ---- enumeration, depth first as PyTorch: this module's own entries in registration order,
  // then each child's; names dotted from this module ----
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  std::vector<Parameter*> parameters();
  // This module's direct submodules in registration order (torch's named_children).
  std::vector<std::pair<std::string, Module*>> named_children() const { return children_; }

  // ---- device placement ----
  // Moves parameters, gradients and buffers of the whole tree (from its root) to `device` of `acc`
  // and allocates missing gradients (zeros, for parameters that require grad); records acc and
  // device on the root.
  void to(const Accelerator& acc, PL_Device device);
  // The accelerator and device the module lives on (the root's); an undefined accelerator and the
  // cpu device before to().
  const Accelerator& accelerator() const;
  PL_Device device() const;

  // ---- training state (the root's, read by every submodule) ----
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const;
  void zero_grad();  // grad_is_zero on every parameter of this module and its submodules
  // Freezes (false) or unfreezes (true) every parameter of this module and its submodules, as
  // torch's module.requires_grad_(); unfreezing a placed module allocates the missing gradients.
  void requires_grad_(bool on);
  // Factor the layers apply to the gradients they write (1 / accumulate_grad_batches), set by the
  // trainer; 1 by default.  Finite and > 0, else pl::Error.
  double grad_scale() const;
  void set_grad_scale(double scale);
  // Layers call grad_ready(p) in backward once p's gradient for this backward is final; the root's
  // hook (the trainer's: ddp starts a bucket's allreduce) gets it.
  void grad_ready(Parameter& p);
  void set_grad_ready_hook(std::function<void(Parameter&)> hook);

  // ---- state dict: per module its parameters then its buffers, then the children's (PyTorch's
  // order), dotted names.  The tensors are the module's own (shared storage). ----
  std::vector<std::pair<std::string, Tensor>> state_dict();
  // Copies values in (onto the module's device).  strict: a missing or unexpected key throws,
  // naming them all; a shape or dtype mismatch always throws, naming the key and both shapes.
  // Everything is checked before anything is copied.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

 private:
  Module* root();
  const Module* root() const;
  void check_name(const std::string& name) const;
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out);
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);
  void collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out);
  void place_tree(const Accelerator& acc, PL_Device device);

  Module* parent_ = nullptr;
  // deques: references handed out by register_* stay valid as more are registered
  std::deque<std::pair<std::string, Parameter>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  // root-only state
  Accelerator acc_;
  PL_Device device_{PL_DEVICE_CPU, 0};
  bool training_ = true;
  double grad_scale_ = 1.0;
  std::function<void(Parameter&)> grad_ready_hook_;
};

}  // namespace pl
