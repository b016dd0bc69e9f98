// pl::torch::init: the job of a libtorch program, over the SDK's JobContext (the knobs, plrun's
// overrides, the launcher's place, the device, the store), once per process.
#include <plrt/sdk/dlpack.hpp>

#include "state.hpp"

namespace pl::torch {

namespace detail {

State& state() {
  static State s;  // never destroyed before the program's DDPs: they are its own objects
  return s;
}

std::shared_ptr<pl::JobContext> context() {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.m);
  if (!s.ctx) init();
  return s.ctx;
}

std::shared_ptr<pl::ProcessGroup> group() {
  State& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.m);
  auto ctx = context();
  if (!s.group) s.group = ctx->process_group("plrt.torch");
  return s.group;
}

TensorView::TensorView(const ::torch::Tensor& t) : dl_(at::toDLPack(t.detach())) {
  view_ = pl::from_dlpack(dl_->dl_tensor);
}

std::string shape_text(const ::torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

::torch::Device torch_device(PL_Device d) {
  if (d.type == PL_DEVICE_CUDA) return {::torch::kCUDA, static_cast<c10::DeviceIndex>(d.index)};
  return {::torch::kCPU};
}

}  // namespace detail

Job init(JobOptions options) {
  detail::State& s = detail::state();
  std::lock_guard<std::recursive_mutex> lock(s.m);
  if (s.ctx) return s.job;
  pl::GradientSyncOptions o;
  o.accelerator = options.accelerator;
  o.devices = pl::Devices::from_text(options.devices);
  // Under torchrun, srun or mpirun "auto" means the processes the launcher started on this node
  // (plrun says it with PL_TRAINER_DEVICES, which wins anyway).
  const pl::ClusterEnv env = pl::ClusterEnv::detect();
  if (options.devices == "auto" && env.source != "none" && !env.spawn_parent && env.local_world_size > 0)
    o.devices = pl::Devices::from_text(std::to_string(env.local_world_size));
  o.cluster = env;
  o.strategy = options.strategy;
  if (options.num_nodes < 1)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "pl::torch::init: num_nodes=" + std::to_string(options.num_nodes) +
                                                 " is not valid: it must be >= 1");
  o.num_nodes = options.num_nodes;
  o.process_group_backend = options.process_group_backend;
  o.strategy_options = options.strategy_options;
  if (options.timeout.count() < 0)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "pl::torch::init: timeout=" + std::to_string(options.timeout.count()) +
                                                 " ms is not valid: it must be >= 0 (0: 30 minutes)");
  o.timeout = options.timeout;
  std::shared_ptr<pl::JobContext> ctx;
  try {
    ctx = std::make_shared<pl::JobContext>(o);
  } catch (const pl::Error& e) {
    throw pl::Error(e.code(), std::string("pl::torch::init: ") + e.what());
  }
  Job j;
  j.rank = ctx->rank();
  j.world_size = ctx->world_size();
  j.local_rank = ctx->local_rank();
  j.local_world_size = ctx->local_world_size();
  j.node_rank = ctx->node_rank();
  j.device = detail::torch_device(ctx->device());
  j.strategy = ctx->job().strategy;
  j.launcher = ctx->launcher();
  if (j.device.is_cuda() && !::torch::cuda::is_available())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "pl::torch::init: the job runs on " + j.device.str() +
                        " but this libtorch has no CUDA (a CPU build, or no GPU it can use); link a CUDA libtorch or "
                        "run with accelerator 'cpu' (plrun --accelerator cpu)");
  s.ctx = std::move(ctx);
  s.job = j;
  return j;
}

bool is_initialized() {
  detail::State& s = detail::state();
  std::lock_guard<std::recursive_mutex> lock(s.m);
  return s.ctx != nullptr;
}

const Job& job() {
  detail::context();
  return detail::state().job;
}

}  // namespace pl::torch
