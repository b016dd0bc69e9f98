// TorchGradientSync: a torch::nn::Module's parameters and buffers handed to pl::GradientSync as
// views (torch tensor → DLPack → PL_Tensor, no copy), and one autograd hook per parameter that tells
// the strategy when its gradient is final, so ddp starts a bucket's allreduce while backward goes
// on, as torch's own DDP does (its Reducer hooks the same place: the parameter's AccumulateGrad).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <plrt/sdk/gradient_sync.hpp>
#include <vector>

struct DLManagedTensor;

class TorchGradientSync {
 public:
  // Allocates every gradient (zeros) so that its memory stays put: autograd then accumulates into
  // it in place, and the strategy's view of it stays valid.  `hooks` false: no per-gradient hook;
  // every gradient is then reduced in after_backward, when backward has ended.
  TorchGradientSync(pl::GradientSync& sync, torch::nn::Module& model, bool hooks = true);
  ~TorchGradientSync();  // removes the hooks, releases the DLPack views
  TorchGradientSync(const TorchGradientSync&) = delete;
  TorchGradientSync& operator=(const TorchGradientSync&) = delete;

  // In place (never set_to_none: the strategy holds views of the gradients); throws if autograd
  // replaced a registered gradient tensor since (the views would then be stale).
  void zero_grad();

 private:
  struct Release {
    void operator()(DLManagedTensor* t) const;
  };
  std::vector<std::unique_ptr<DLManagedTensor, Release>> views_;
  std::vector<torch::Tensor> params_, grads_;  // each trainable parameter and its registered gradient
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};
