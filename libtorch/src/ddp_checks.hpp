// DistributedDataParallel's checks, each an error naming the bad value and what would be valid
// (PL_ERR_INVALID_ARGUMENT): the strategy, the options, the module (device, contiguity), the same
// parameters on every rank (a collective), and before each training forward the state the strategy
// relies on (the parameters' memory, their gradients' shapes).
#pragma once

#include <memory>
#include <plrt/sdk/job_context.hpp>
#include <plrt/sdk/process_group.hpp>
#include <plrt/torch.hpp>
#include <string>
#include <vector>

namespace pl::torch::detail {

// The strategy's plugin name ("ddp" for an alias of it); dp, ddp2, ddp_spawn (and strategies that
// spawn or drive several devices from one process) are refused by name.
std::string strategy_plugin(const std::string& who, const std::string& strategy, const pl::JobContext& ctx);
void check_options(const std::string& who, const DdpOptions& o);
void check_module(const std::string& who, ::torch::nn::Module& module, const ::torch::Device& device);
// Names, kinds, dtypes and shapes of the parameters and buffers against rank 0's; every rank
// learns whether any differs, and throws (the differing ranks name their first difference).
void check_same_on_every_rank(const std::string& who, ::torch::nn::Module& module,
                              const std::shared_ptr<pl::ProcessGroup>& group);

struct TrackedTensor {
  std::string name;
  ::torch::Tensor value, grad_mem;
  size_t index = 0;
  const void* data = nullptr;
};
// Before a training forward: every registered tensor still at its memory, contiguous; every
// trainable gradient (when set) of its parameter's shape, dtype and device.
void check_step_state(const std::string& who, const std::vector<TrackedTensor>& params,
                      const std::vector<TrackedTensor>& others);

}  // namespace pl::torch::detail
