// DistributedDataParallel's state (distributed_data_parallel.cpp), shared with the
// ZeroRedundancyOptimizer that steps a DDP's parameters (zero_redundancy_optimizer.cpp).
#pragma once

#include <atomic>
#include <memory>
#include <plrt/sdk/gradient_sync.hpp>
#include <plrt/sdk/job_context.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ddp_checks.hpp"
#include "state.hpp"

namespace pl::torch {

struct DdpCore::Impl {
  std::shared_ptr<::torch::nn::Module> module;
  DdpOptions o;
  std::string strategy, who;
  int instance = 1;
  std::shared_ptr<pl::JobContext> ctx;
  std::unique_ptr<pl::GradientSync> sync;

  using Param = detail::TrackedTensor;  // name, value, grad_mem (trainable), index, data
  std::vector<Param> params;            // trainable ones, in named_parameters order
  std::vector<Param> others;            // frozen parameters and buffers (for the checks)
  std::vector<std::pair<std::string, ::torch::Tensor>> buffers;
  std::vector<detail::TensorView> views;
  std::vector<std::pair<std::shared_ptr<::torch::autograd::Node>, uintptr_t>> hooks;
  bool manage_buffers = false;  // the ddp family: the buffer rule is applied here, not by the strategy
  double lr_scale = 1.0;

  // ---- the step ----
  bool require_forward_param_sync = true;
  bool no_sync = false;   // a no_sync() scope is open
  bool step_sync = true;  // the last training forward's decision
  std::atomic<bool> queued{false};
  std::vector<uint8_t> used;  // per trainable parameter: got a gradient in this backward
  // find_unused_parameters: per trainable parameter, whether any rank used it in the last
  // synchronised backward (empty otherwise)
  std::vector<int32_t> global_used;
  std::vector<uint8_t> early_unused;  // reported unused at forward time (mark_unused)
  bool any_early_unused = false;
  bool shards = false;     // the strategy shards the gradients (ddp_sharded)
  bool owns_step = false;  // sharded, or the strategy acts around the step (bagua): steps go through step()
  bool stepped = true;     // step() ran since the last synchronised backward

  // The index in `params` of the trainable parameter whose value is `t` (the same tensor), or -1.
  int64_t param_of(const ::torch::Tensor& t) const {
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].value.is_same(t)) return static_cast<int64_t>(i);
    return -1;
  }
  void register_with_strategy();
  void broadcast_buffers();
  void mark_unused(const std::vector<::torch::Tensor>& outputs);
  void fill_unused(Param& p);
  void queue_end();
  void on_grad(size_t i);
  void end_backward();
  [[noreturn]] void bad(const std::string& why) const { throw pl::Error(PL_ERR_INVALID_ARGUMENT, who + ": " + why); }
};

}  // namespace pl::torch
