// The TrainerModel of a pl::torch::LightningModule (plrt/torch/lightning.hpp): a libtorch module
// presented to pl::Trainer's loop in its terms.
//
// Memory.  Each parameter's value is the torch tensor's own memory, borrowed as a pl::Tensor (the
// strategy's broadcasts and the optimizer write into it in place).  Each trainable parameter gets
// gradient memory of its own here, made its .grad() at placement: autograd's AccumulateGrad adds
// into .grad() in place (outside grad mode), so a backward lands in the memory the strategy
// reduces, without a copy.  zero_grad marks a gradient unwritten (pl::Parameter::grad_is_zero); the
// memory is zeroed before the next backward, so that backward writes it, and a parameter that got
// no gradient is skipped by the optimizer, as PyTorch skips a None gradient.
//
// The step.  training_step's loss is multiplied by the step's gradient factor and loss scale, then
// backward runs; AccumulateGrad's post hook of each parameter marks its gradient written and tells
// the loop, which starts the strategy's bucket as PyTorch's Reducer does from the same place.
#include <c10/util/Type.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <deque>
#include <plrt/sdk/dlpack.hpp>
#include <plrt/torch/data.hpp>
#include <plrt/torch/lightning.hpp>
#include <set>

#include "autocast_guard.hpp"
#include "state.hpp"
#include "tensor_bridge.hpp"
#include "torch_lr_scheduler.hpp"
#include "torch_optimizer.hpp"

namespace pl::torch {

namespace {

// The class name without namespaces and libtorch's "Impl" suffix ("torch::nn::LinearImpl" → "Linear").
std::string short_type(const std::string& demangled) {
  const size_t open = demangled.find('<');
  const size_t colon = demangled.rfind("::", open == std::string::npos ? std::string::npos : open);
  std::string s = colon == std::string::npos ? demangled : demangled.substr(colon + 2);
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "Impl") == 0) s.resize(s.size() - 4);
  return s;
}

using detail::borrow;
using detail::to_torch;

Batch to_torch(const pl::Batch& b) {
  Batch out;
  out.reserve(b.size());
  for (const auto& t : b) out.push_back(to_torch(t));
  return out;
}

// The autocast dtype of a step's compute dtype (none for 32-true).
at::ScalarType autocast_dtype(PL_DType compute) {
  return compute == PL_F16 ? at::kHalf : compute == PL_BF16 ? at::kBFloat16 : at::ScalarType::Undefined;
}

class TorchModel final : public pl::TrainerModel {
 public:
  explicit TorchModel(LightningModule& m) : m_(m) {}
  ~TorchModel() override { unhook(); }

  std::string type_name() const override { return c10::demangle(typeid(m_).name()); }

  // Mixed precision is libtorch's autocast around each step (autocast_guard.hpp); 16-mixed's loss
  // scale and its unscale/skip are the loop's, on the gradient memory.  Checked at place(), which
  // knows the device.
  void check_precision(const std::string& precision, PL_DType compute) const override {
    precision_ = precision;
    compute_ = compute;
  }

  void place(const pl::Accelerator& acc, PL_Device device) override {
    if (compute_ == PL_F16 && device.type != PL_DEVICE_CUDA)  // as Lightning refuses fp16 AMP on CPU
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "precision '" + precision_ +
                          "' for a libtorch module on the cpu accelerator: libtorch's autocast computes in bfloat16 "
                          "on CPU, not float16; use precision 'bf16-mixed' (or '16-mixed' on a cuda device)");
    cuda_ = device.type == PL_DEVICE_CUDA;
    unhook();
    acc_ = acc;
    m_.to(detail::torch_device(device));
    recs_.clear();
    buffers_.clear();
    for (auto& item : m_.named_parameters()) {
      ::torch::Tensor& p = item.value();
      if (!p.is_contiguous())
        throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                        "parameter '" + item.key() +
                            "' is not contiguous; the Trainer shares parameters' memory "
                            "with the strategy: make it contiguous (p.set_data(p.contiguous()))");
      Rec& r = recs_.emplace_back();
      r.name = item.key();
      r.value = p;
      r.param.value = borrow(p, acc);
      r.param.requires_grad = p.requires_grad();
      if (p.requires_grad()) {
        ::torch::NoGradGuard no_grad;
        r.grad = ::torch::zeros_like(p, ::torch::MemoryFormat::Contiguous);
        p.mutable_grad() = r.grad;
        r.param.grad = borrow(r.grad, acc);
      }
    }
    for (auto& item : m_.named_buffers()) {
      if (!item.value().defined()) continue;
      if (!item.value().is_contiguous())
        throw pl::Error(PL_ERR_INVALID_ARGUMENT, "buffer '" + item.key() + "' is not contiguous");
      buffers_.emplace_back(item.key(), borrow(item.value(), acc));
    }
  }

  std::vector<std::pair<std::string, pl::Parameter*>> parameters() override {
    std::vector<std::pair<std::string, pl::Parameter*>> out;
    for (auto& r : recs_) out.emplace_back(r.name, &r.param);
    return out;
  }
  std::vector<std::pair<std::string, pl::Tensor*>> buffers() override {
    std::vector<std::pair<std::string, pl::Tensor*>> out;
    for (auto& [name, t] : buffers_) out.emplace_back(name, &t);
    return out;
  }

  void set_grad_ready_hook(std::function<void(size_t)> hook) override {
    unhook();
    if (!hook) return;
    hook_ = std::move(hook);
    for (size_t i = 0; i < recs_.size(); ++i) {
      if (!recs_[i].value.requires_grad()) continue;
      std::shared_ptr<::torch::autograd::Node> node = ::torch::autograd::impl::grad_accumulator(recs_[i].value);
      if (!node)
        throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                        "parameter '" + recs_[i].name + "' has no gradient accumulator (is it a leaf?)");
      const uintptr_t key = node->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
          [this, i](const ::torch::autograd::variable_list& outputs, const ::torch::autograd::variable_list&) {
            on_grad(i);
            return outputs;
          }));
      hooks_.emplace_back(std::move(node), key);
    }
  }

  void train(bool on) override { m_.train(on); }
  bool training() const override { return m_.is_training(); }
  void zero_grad() override {
    for (auto& r : recs_) r.param.grad_is_zero = true;
  }
  void fill_unwritten_grads() override {
    ::torch::NoGradGuard no_grad;
    for (auto& r : recs_)
      if (r.grad.defined() && r.param.grad_is_zero) r.grad.zero_(), r.param.grad_is_zero = false;
  }

  std::vector<std::pair<std::string, pl::Tensor>> state_dict() override {
    std::vector<std::pair<std::string, pl::Tensor>> out;
    for (auto& r : recs_) out.emplace_back(r.name, r.param.value);
    for (auto& [name, t] : buffers_) out.emplace_back(name, t);
    return out;
  }

  void load_state_dict(const std::map<std::string, pl::Tensor>& state, bool strict) override {
    std::vector<std::pair<std::string, ::torch::Tensor>> mine;
    for (auto& item : m_.named_parameters()) mine.emplace_back(item.key(), item.value());
    for (auto& item : m_.named_buffers())
      if (item.value().defined()) mine.emplace_back(item.key(), item.value());
    std::set<std::string> known;
    std::string missing, unexpected;
    for (auto& [name, t] : mine) {
      known.insert(name);
      auto it = state.find(name);
      if (it == state.end()) {
        missing += (missing.empty() ? "" : ", ") + name;
        continue;
      }
      const ::torch::Tensor src = to_torch(it->second);
      if (!src.sizes().equals(t.sizes()) || src.scalar_type() != t.scalar_type())
        throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                        "load_state_dict: '" + name + "' is " + std::string(c10::toString(src.scalar_type())) + " " +
                            detail::shape_text(src) + " in the state, " + std::string(c10::toString(t.scalar_type())) +
                            " " + detail::shape_text(t) + " in the module");
    }
    for (auto& [name, t] : state)
      if (!known.count(name)) unexpected += (unexpected.empty() ? "" : ", ") + name;
    if (strict && (!missing.empty() || !unexpected.empty()))
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "load_state_dict: " + (missing.empty() ? std::string() : "missing: " + missing) +
                          (missing.empty() || unexpected.empty() ? "" : "; ") +
                          (unexpected.empty() ? std::string() : "unexpected: " + unexpected));
    ::torch::NoGradGuard no_grad;
    for (auto& [name, t] : mine) {
      auto it = state.find(name);
      if (it != state.end()) t.copy_(to_torch(it->second));
    }
  }

  std::vector<Submodule> submodules(int max_depth) override {
    std::vector<Submodule> out;
    collect(m_, "", 0, max_depth, out);
    return out;
  }

  std::unique_ptr<pl::TrainerModel> replicate(pl::Trainer*) const override {
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "dp and ddp2 run one copy of the module per device of a process; a libtorch module trains under "
                    "one process per device: use strategy ddp (or bagua, horovod)");
  }

  pl::Scalar training_step(const pl::Batch& batch, int64_t batch_idx, const pl::StepScales& s) override {
    {
      ::torch::NoGradGuard no_grad;
      for (auto& r : recs_)
        if (r.grad.defined() && r.param.grad_is_zero) r.grad.zero_();  // this backward writes it
    }
    ::torch::Tensor loss;
    {
      detail::AutocastGuard autocast(cuda_, autocast_dtype(s.compute));
      loss = m_.training_step(to_torch(batch), batch_idx);
    }
    if (!loss.defined() || loss.numel() != 1)
      throw pl::Error(
          PL_ERR_INVALID_ARGUMENT,
          "training_step must return the loss, a tensor of one element; it returned " +
              (loss.defined() ? "a tensor shaped " + detail::shape_text(loss) : std::string("an undefined tensor")));
    if (!loss.requires_grad())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                      "training_step returned a loss that does not require grad (computed under NoGradGuard, or "
                      "detached?); the Trainer runs its backward");
    const double factor = s.grad * s.loss;
    (factor == 1.0 ? loss : loss * factor).backward();
    const ::torch::Tensor value = loss.detach();
    return pl::Scalar::deferred([value] { return value.item<double>(); });
  }

  pl::Scalar training_step_end(std::vector<pl::ReplicaOutput>& outputs, const pl::StepScales&) override {
    return outputs.at(0).loss;
  }

  void eval_step(pl::ReplicaOutput& out, int64_t batch_idx, bool test, PL_DType compute) override {
    ::torch::NoGradGuard no_grad;
    detail::AutocastGuard autocast(cuda_, autocast_dtype(compute));
    const Batch b = to_torch(out.batch);
    test ? m_.test_step(b, batch_idx) : m_.validation_step(b, batch_idx);
  }
  void eval_step_end(std::vector<pl::ReplicaOutput>&, bool, PL_DType) override {}

  pl::Tensor predict_step(const pl::Batch& batch, int64_t batch_idx, PL_DType compute) override {
    ::torch::NoGradGuard no_grad;
    ::torch::Tensor out;
    {
      detail::AutocastGuard autocast(cuda_, autocast_dtype(compute));
      out = m_.predict_step(to_torch(batch), batch_idx);
    }
    if (!out.defined()) return {};
    return borrow(out.contiguous(), acc_);
  }

  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    std::unique_ptr<::torch::optim::Optimizer> opt = m_.configure_optimizers();
    if (!opt) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "configure_optimizers returned no optimizer");
    std::vector<pl::Parameter*> params;
    std::vector<::torch::Tensor> values, grads;
    for (const auto& group : opt->param_groups())
      for (const ::torch::Tensor& t : group.params()) {
        auto it = std::find_if(recs_.begin(), recs_.end(), [&](const Rec& r) { return r.value.is_same(t); });
        if (it == recs_.end())
          throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                          "configure_optimizers returned an optimizer over a tensor (shaped " + detail::shape_text(t) +
                              ") that is not one of this module's parameters; make it over parameters() (after the "
                              "module's registration, which the Trainer placed on its device)");
        if (!it->grad.defined())
          throw pl::Error(PL_ERR_INVALID_ARGUMENT, "configure_optimizers: parameter '" + it->name +
                                                       "' does not require grad; leave frozen parameters out");
        params.push_back(&it->param);
        values.push_back(it->value);
        grads.push_back(it->grad);
      }
    return std::make_unique<detail::TorchOptimizer>(std::move(opt), std::move(params), std::move(values),
                                                    std::move(grads));
  }

  // libtorch's schedulers first (wrapped: torch_lr_scheduler.hpp), then plrt's.
  std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer& optimizer) override {
    std::vector<pl::LRSchedulerConfig> out;
    if (auto* t = dynamic_cast<detail::TorchOptimizer*>(&optimizer))
      for (SchedulerConfig& c : m_.configure_torch_lr_schedulers(t->torch())) {
        pl::LRSchedulerConfig p;
        p.scheduler = std::make_shared<detail::TorchLRScheduler>(*t, std::move(c.scheduler));
        p.interval = c.interval;
        p.frequency = c.frequency;
        out.push_back(std::move(p));
      }
    for (pl::LRSchedulerConfig& c : m_.configure_lr_schedulers(optimizer)) out.push_back(std::move(c));
    return out;
  }

 private:
  struct Rec {
    std::string name;
    ::torch::Tensor value, grad;  // grad: the gradient memory (undefined when frozen)
    pl::Parameter param;
  };

  void on_grad(size_t i) {
    Rec& r = recs_[i];
    const ::torch::Tensor g = r.value.grad();
    if (g.defined() && !g.is_same(r.grad)) {  // the program replaced .grad(): its values count
      ::torch::NoGradGuard no_grad;
      if (r.param.grad_is_zero)
        r.grad.copy_(g);
      else
        r.grad.add_(g);
      r.value.mutable_grad() = r.grad;
    }
    r.param.grad_is_zero = false;
    if (hook_) hook_(i);
  }

  void unhook() {
    for (auto& [node, key] : hooks_) node->del_post_hook(key);
    hooks_.clear();
    hook_ = nullptr;
  }

  static void collect(::torch::nn::Module& m, const std::string& prefix, int depth, int max_depth,
                      std::vector<Submodule>& out) {
    for (auto& item : m.named_children()) {
      const std::string full = prefix.empty() ? item.key() : prefix + "." + item.key();
      Submodule row{full, short_type(c10::demangle(typeid(*item.value()).name())), 0};
      for (auto& p : item.value()->parameters()) row.params += p.numel();
      out.push_back(row);
      if (max_depth < 0 || depth + 1 < max_depth) collect(*item.value(), full, depth + 1, max_depth, out);
    }
  }

  LightningModule& m_;
  pl::Accelerator acc_;
  // the precision, remembered by check_precision for place() (which knows the device)
  mutable std::string precision_ = "32-true";
  mutable PL_DType compute_ = PL_DTYPE_INVALID;
  bool cuda_ = false;
  std::deque<Rec> recs_;  // a deque: the loop keeps pointers to the records
  std::deque<std::pair<std::string, pl::Tensor>> buffers_;
  std::function<void(size_t)> hook_;
  std::vector<std::pair<std::shared_ptr<::torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace

std::unique_ptr<pl::TrainerModel> LightningModule::trainer_model() { return std::make_unique<TorchModel>(*this); }

::torch::Tensor LightningModule::predict_step(const Batch&, int64_t) {
  throw pl::Error(
      PL_ERR_INVALID_ARGUMENT,
      "Trainer::predict needs predict_step: override it to return the batch's prediction (e.g. the logits)");
}

void LightningModule::log(const std::string& name, const ::torch::Tensor& value, const pl::LogOptions& options) {
  if (!value.defined() || value.numel() != 1)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "log('" + name + "'): a tensor of one element is logged; this one is " +
                        (value.defined() ? "shaped " + detail::shape_text(value) : std::string("undefined")));
  const ::torch::Tensor v = value.detach();
  log(name, pl::Scalar::deferred([v] { return v.item<double>(); }), options);
}

::torch::Tensor LightningModule::all_gather(const ::torch::Tensor& x) {
  if (!x.defined()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "all_gather: the tensor is undefined");
  const ::torch::Tensor t = x.dim() == 0 ? x.reshape({1}) : x;
  const pl::Batch host = detail::to_host_batch({t});  // through host memory, whatever x's device
  std::vector<::torch::Tensor> parts;
  for (const pl::Tensor& p : pl::LightningBase::all_gather(host.at(0))) parts.push_back(to_torch(p).to(x.device()));
  ::torch::Tensor out = ::torch::stack(parts);
  return x.dim() == 0 ? out.reshape({static_cast<int64_t>(parts.size())}) : out;
}

}  // namespace pl::torch
