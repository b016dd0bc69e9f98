// TorchGradientSync: DLPack views of a torch module's tensors for pl::GradientSync, and the
// AccumulateGrad post hooks that report each gradient (torch_sync.hpp).
#include "torch_sync.hpp"

#include <ATen/DLConvertor.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <plrt/sdk/dlpack.hpp>

void TorchGradientSync::Release::operator()(DLManagedTensor* t) const {
  if (t && t->deleter) t->deleter(t);
}

TorchGradientSync::TorchGradientSync(pl::GradientSync& sync, torch::nn::Module& model, bool hooks) {
  auto view = [this](const torch::Tensor& t) {
    // toDLPack keeps a reference to the tensor's storage until the view is released.
    views_.emplace_back(at::toDLPack(t.detach()));
    return pl::from_dlpack(views_.back()->dl_tensor);
  };
  std::vector<pl::ExternalParameter> params;
  std::vector<torch::Tensor> trainable;
  for (auto& item : model.named_parameters()) {
    torch::Tensor& p = item.value();
    if (!p.is_contiguous())
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "parameter '" + item.key() + "' is not contiguous");
    pl::ExternalParameter e;
    e.name = item.key();
    e.value = view(p);
    if (p.requires_grad()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      params_.push_back(p);
      grads_.push_back(p.grad());
      e.grad = view(p.grad());
      trainable.push_back(p);
    } else {
      e.kind = PL_PARAM_FROZEN;
      trainable.push_back(torch::Tensor());
    }
    params.push_back(e);
  }
  for (auto& item : model.named_buffers()) {
    pl::ExternalParameter e;
    e.name = item.key();
    e.value = view(item.value());
    e.kind = PL_PARAM_BUFFER;
    params.push_back(e);
  }
  sync.setup(std::move(params));  // ddp: rank 0's values broadcast into the module's memory
  if (!hooks) return;
  for (size_t i = 0; i < trainable.size(); ++i) {
    if (!trainable[i].defined()) continue;
    // The post hook of the parameter's AccumulateGrad runs once the gradient is accumulated into
    // p.grad() (in place: it is defined), i.e. when it is final for this backward.
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(trainable[i]);
    const uintptr_t key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [&sync, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          sync.grad_ready(i);
          return outputs;
        }));
    hooks_.emplace_back(std::move(acc), key);  // keeps the accumulator alive, as DDP's Reducer does
  }
}

TorchGradientSync::~TorchGradientSync() {
  for (auto& [acc, key] : hooks_) acc->del_post_hook(key);
}

void TorchGradientSync::zero_grad() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!params_[i].grad().is_same(grads_[i]))
      throw pl::Error(PL_ERR_RUNTIME,
                      "a parameter's gradient tensor was replaced (set_to_none, or assigned) after "
                      "it was registered with plrt; zero gradients in place");
    grads_[i].zero_();
  }
}
