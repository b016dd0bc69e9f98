// plrt::torch: PyTorch's distributed training for libtorch programs, with PyTorch's names.
//
//   auto job = pl::torch::init();                      // the launcher's rank, world size, device
//   Net net;  net->to(job.device);
//   pl::torch::DistributedDataParallel ddp(net);       // rank 0's weights on every rank
//   torch::optim::Adam opt(ddp.module()->parameters());
//   for (...) {
//     opt.zero_grad();
//     auto loss = loss_fn(ddp(x), y);
//     loss.backward();                                 // the gradients are the ranks' mean here
//     opt.step();
//   }
//
// Launched by plrun (`plrun --strategy ddp --devices 2 -- ./train`), torchrun, srun, mpirun or
// horovodrun, as pl::Trainer is; one process alone runs as a job of one.  The strategies are plrt's
// plugins (ddp, ddp_sharded, bagua and its algorithms, horovod).  Errors are pl::Error; bad input
// has code PL_ERR_INVALID_ARGUMENT (exit_code_of maps it to 2).  docs/libtorch.md has the whole
// story; the data side is libtorch's own DistributedRandomSampler with job.rank / job.world_size.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/exit_code.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace pl::torch {

struct JobOptions {
  std::string accelerator = "auto";  // "cpu", "cuda", "auto" (cuda when a GPU is usable)
  std::string devices = "auto";      // processes per node under a launcher; plrun's --devices wins
  std::string strategy = "ddp";      // the job's strategy (DdpOptions::strategy may pick another)
  int num_nodes = 1;
  std::string process_group_backend;  // empty: nccl on cuda, gloo otherwise
  std::vector<std::pair<std::string, std::string>> strategy_options;
  std::chrono::milliseconds timeout{0};  // every collective and store wait; 0: 30 minutes
};

struct Job {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0;
  ::torch::Device device{::torch::kCPU};  // cuda:<local rank's device> under a cuda job
  std::string strategy;                   // the job's, after plrun's --strategy
  std::string launcher;                   // "plrun", "torchrun", "slurm", "mpirun", ..., "none"
  bool is_global_zero() const { return rank == 0; }
};

// Reads the launcher and the knobs (plrun's PL_TRAINER_* variables override `options`), selects
// this process's device (and makes it libtorch's current CUDA device) and connects the job's
// store.  Once per process: a second call returns the same job (its options are not read again).
Job init(JobOptions options = {});
bool is_initialized();
const Job& job();  // init()'s; init() with the defaults when it was not called

// ---- collectives on torch::Tensors over the job's process group (torch.distributed's names) ----
// Tensors are contiguous and on job().device (CUDA tensors go to nccl as they are, through DLPack
// views; CPU tensors to gloo).  Every call is a collective: every rank calls it, in the same order.
enum class ReduceOp {
  SUM = 1,
  AVG = 2,
  MIN = 3,
  MAX = 4,
  PRODUCT = 5
};
void all_reduce(::torch::Tensor& tensor, ReduceOp op = ReduceOp::SUM);
void broadcast(::torch::Tensor& tensor, int src);
void all_gather(std::vector<::torch::Tensor>& tensor_list, const ::torch::Tensor& tensor);
::torch::Tensor all_gather(const ::torch::Tensor& tensor);  // every rank's, stacked along a new dim 0
void reduce_scatter(::torch::Tensor& output, const std::vector<::torch::Tensor>& input_list,
                    ReduceOp op = ReduceOp::SUM);
void barrier();

// ---- DistributedDataParallel ----
struct DdpOptions {
  // Empty: the job's (init's strategy; plrun's --strategy).  ddp, ddp_sharded, bagua (and every
  // algorithm alias: bagua_bytegrad, ...), horovod; dp, ddp2 and ddp_spawn are refused by name.
  std::string strategy;
  std::vector<std::pair<std::string, std::string>> strategy_options;  // the strategy's own (stage=1, ...)
  std::string process_group_backend;  // empty: the job's (init's; nccl on cuda, gloo otherwise)
  double bucket_cap_mb = 25.0;        // ddp, ddp_sharded: gradient bucket size
  bool broadcast_buffers = true;      // rank 0's buffers before each forward that follows a synced one
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;  // true: each param.grad() is plrt's reduced memory (no copy back)
};

class NoSyncGuard;

// The non-template part of DistributedDataParallel (plrt_torch's library).
class DdpCore {
 public:
  DdpCore(std::shared_ptr<::torch::nn::Module> module, DdpOptions options);
  ~DdpCore();
  DdpCore(const DdpCore&) = delete;
  DdpCore& operator=(const DdpCore&) = delete;

  // Runs `forward` as the strategy's step (training: grad mode on), after the buffer rule; then
  // hooks the outputs so that backward through them ends the step.
  void run_forward(const std::function<void()>& forward);
  void attach_outputs(const std::vector<::torch::Tensor>& outputs);
  NoSyncGuard no_sync();
  // The optimizer step through the strategy (ddp_sharded: each rank's shard, then the updated
  // values gathered from their owners; bagua: its weight exchange around `step`; ddp: just `step`).
  void step(const std::function<void()>& step);
  // Makes every rank's weights rank 0's now (bagua_async, whose ranks drift apart; a collective,
  // between steps); nothing for the strategies whose ranks never drift.
  void sync_weights();
  // What the strategy asks of the learning rate (horovod: x world size, as Lightning's
  // HorovodStrategy scales it); 1 for the others.
  double lr_scale() const;
  const DdpOptions& options() const;
  const std::string& strategy() const;
  double stat(const std::string& name) const;  // the strategy's statistics (early_launches, ...)

  struct Impl;

 private:
  friend class NoSyncGuard;
  std::unique_ptr<Impl> impl_;
};

// torch's `with ddp.no_sync():` as a scope: forwards run inside it accumulate their gradients
// locally; the first forward after it synchronises everything accumulated.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(DdpCore::Impl* impl);
  ~NoSyncGuard();
  NoSyncGuard(NoSyncGuard&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  DdpCore::Impl* impl_;
};

namespace detail {
template <class T>
void collect(std::vector<::torch::Tensor>& out, const T& v) {
  if constexpr (std::is_same_v<std::decay_t<T>, ::torch::Tensor>) {
    out.push_back(v);
  } else if constexpr (std::is_same_v<std::decay_t<T>, std::vector<::torch::Tensor>>) {
    out.insert(out.end(), v.begin(), v.end());
  }
}
template <class... T>
void collect(std::vector<::torch::Tensor>& out, const std::tuple<T...>& t) {
  std::apply([&](const auto&... e) { (collect(out, e), ...); }, t);
}
template <class A, class B>
void collect(std::vector<::torch::Tensor>& out, const std::pair<A, B>& p) {
  collect(out, p.first);
  collect(out, p.second);
}
template <class T>
std::shared_ptr<::torch::nn::Module> module_ptr(const std::shared_ptr<T>& m) {
  return std::static_pointer_cast<::torch::nn::Module>(m);
}
template <class T>
std::shared_ptr<::torch::nn::Module> module_ptr(const ::torch::nn::ModuleHolder<T>& m) {
  return std::static_pointer_cast<::torch::nn::Module>(m.ptr());
}
}  // namespace detail

// DistributedDataParallel for a TORCH_MODULE holder (Net) or a std::shared_ptr of a
// torch::nn::Module with a forward.  Construction is a collective: it checks that every rank holds
// the same parameters (names, shapes, dtypes; the first difference is named) and broadcasts rank
// 0's parameters and buffers.  `ddp(args...)` calls module->forward(args...); loss.backward() then
// averages the gradients across ranks, overlapped with backward, and they are final when backward()
// returns.  The module's parameters must stay where they are (the same tensors, contiguous, on
// job().device) while the DDP lives; their gradients may be set to none (zero_grad's default).
template <class M>
class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(M module, DdpOptions options = {})
      : module_(std::move(module)), core_(detail::module_ptr(module_), std::move(options)) {}

  template <class... Args>
  auto operator()(Args&&... args) {
    using Out = decltype(module_->forward(std::forward<Args>(args)...));
    std::optional<Out> out;
    core_.run_forward([&] { out.emplace(module_->forward(std::forward<Args>(args)...)); });
    std::vector<::torch::Tensor> tensors;
    detail::collect(tensors, *out);
    core_.attach_outputs(tensors);
    return std::move(*out);
  }
  template <class... Args>
  auto forward(Args&&... args) {
    return (*this)(std::forward<Args>(args)...);
  }

  M& module() { return module_; }
  const M& module() const { return module_; }
  NoSyncGuard no_sync() { return core_.no_sync(); }
  // Steps the program's optimizer through the strategy: `ddp.step([&] { optimizer.step(); })`.
  // Needed under ddp_sharded (the gradients are reduce-scattered: each rank steps its shard and the
  // values are gathered after) and bagua (its algorithms exchange weights before or after the step;
  // async pauses its averaging thread), refused at the next forward when skipped there; the same as
  // optimizer.step() under ddp and horovod.
  template <class F>
  void step(F&& f) {
    core_.step(std::function<void()>(std::forward<F>(f)));
  }
  // Every rank's weights rank 0's now: bagua_async's ranks drift apart (call it before evaluating
  // or saving, as Bagua's abort()); a collective; nothing under the other strategies.
  void sync_weights() { core_.sync_weights(); }
  double lr_scale() const { return core_.lr_scale(); }
  const DdpOptions& options() const { return core_.options(); }
  const std::string& strategy() const { return core_.strategy(); }
  double stat(const std::string& name) const { return core_.stat(name); }

 private:
  M module_;
  DdpCore core_;
};

template <class M>
DistributedDataParallel(M) -> DistributedDataParallel<M>;
template <class M>
DistributedDataParallel(M, DdpOptions) -> DistributedDataParallel<M>;

// ---- ZeroRedundancyOptimizer ----
// The non-template part of ZeroRedundancyOptimizer (plrt_torch's library).
class ZeroCore {
 public:
  // Makes this rank's optimizer over the tensors it owns.
  using MakeLocal = std::function<std::unique_ptr<::torch::optim::Optimizer>(std::vector<::torch::Tensor>)>;
  ZeroCore(std::vector<::torch::Tensor> params, const MakeLocal& make);
  ~ZeroCore();
  ZeroCore(const ZeroCore&) = delete;
  ZeroCore& operator=(const ZeroCore&) = delete;
  void step();
  void zero_grad(bool set_to_none);
  ::torch::optim::Optimizer& local();
  const std::vector<::torch::Tensor>& owned() const;
  bool sharded() const;
  // A fresh per-parameter state of the optimizer's type (for loading); null: not supported.
  using MakeState = std::function<std::unique_ptr<::torch::optim::OptimizerParamState>()>;
  void set_state_factory(MakeState make);
  // This rank's partition's state, per parameter ("p<i>", or "s<i>_<begin>_<end>" for a shard), as
  // the bytes of a torch archive; and the reverse over every rank's bytes, written at any world
  // size (a shard's state assembled from the saved ranges that overlap it).
  std::string save_partition() const;
  void load_partitions(const std::vector<std::string>& files);
  // Every parameter's state on rank `to` (a collective): an optimizer of the same type over all
  // the parameters, as one optimizer would hold them (torch's consolidate_state_dict; the others
  // get null).  Whole-parameter partitions only.
  std::unique_ptr<::torch::optim::Optimizer> consolidate(int to);
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// torch.distributed.optim.ZeroRedundancyOptimizer for any torch::optim optimizer: each rank keeps
// the optimizer state of its partition only and steps it; the updated values are then shared.
//   - Under a DistributedDataParallel of strategy ddp (or bagua, horovod; or no DDP at all), the
//     parameters are partitioned whole, as PyTorch does (each in turn, largest first, to the rank
//     holding the fewest elements so far), and each is broadcast from its owner after the step.
//     A rank's state is at most 1/W of the whole plus the largest parameter's.
//   - Under ddp_sharded (ZeRO-2: the gradients are reduce-scattered), the partition is the
//     strategy's element ranges, and the strategy gathers the values after the step.
// Construction is a collective only in that every rank must make it with the same parameters.
// The per-parameter state type of each torch::optim optimizer (checkpoints of a ZeRO partition).
template <class Opt>
struct ParamStateOf {
  using type = void;  // an optimizer not listed here: its ZeRO checkpoints cannot be loaded
};
template <>
struct ParamStateOf<::torch::optim::SGD> {
  using type = ::torch::optim::SGDParamState;
};
template <>
struct ParamStateOf<::torch::optim::Adam> {
  using type = ::torch::optim::AdamParamState;
};
template <>
struct ParamStateOf<::torch::optim::AdamW> {
  using type = ::torch::optim::AdamWParamState;
};
template <>
struct ParamStateOf<::torch::optim::RMSprop> {
  using type = ::torch::optim::RMSpropParamState;
};
template <>
struct ParamStateOf<::torch::optim::Adagrad> {
  using type = ::torch::optim::AdagradParamState;
};

template <class Opt>
class ZeroRedundancyOptimizer {
 public:
  template <class Options>
  ZeroRedundancyOptimizer(std::vector<::torch::Tensor> params, Options options)
      : core_(std::move(params),
              [options](std::vector<::torch::Tensor> owned) -> std::unique_ptr<::torch::optim::Optimizer> {
                return std::make_unique<Opt>(std::move(owned), options);
              }) {
    using State = typename ParamStateOf<Opt>::type;
    if constexpr (!std::is_void_v<State>) core_.set_state_factory([] { return std::make_unique<State>(); });
  }
  // torch's consolidate_state_dict(to): every parameter's state gathered on rank `to`, returned
  // there as one Opt over all the parameters (torch::save it, or read its state()); null on the
  // other ranks.  A collective.
  std::unique_ptr<Opt> consolidate_state_dict(int to = 0) {
    auto all = core_.consolidate(to);
    return std::unique_ptr<Opt>(static_cast<Opt*>(all.release()));
  }
  ZeroCore& core() { return core_; }
  void step() { core_.step(); }
  void zero_grad(bool set_to_none = true) { core_.zero_grad(set_to_none); }
  Opt& optimizer() { return static_cast<Opt&>(core_.local()); }  // this rank's partition
  const std::vector<::torch::Tensor>& owned_parameters() const { return core_.owned(); }
  bool sharded() const { return core_.sharded(); }

 private:
  ZeroCore core_;
};

// ---- checkpoints ----
// What a checkpoint carries besides the tensors: the program's counters.
struct CheckpointInfo {
  int64_t step = 0;                      // the program's step (or epoch) to resume from
  std::map<std::string, double> values;  // anything else it wants back
  int world_size = 0;                    // load_checkpoint: the world size that wrote it
};

// A collective: every rank calls it with the same path (a folder on storage every rank sees).
// Rank 0 writes the module (model.safetensors: parameters and buffers, loadable by safetensors in
// Python), a plain optimizer's state (optimizer.pt: every rank's is the same under DDP) and
// info.json; with a ZeroRedundancyOptimizer every rank writes its partition
// (optimizer.rank<r>.pt, nothing gathered).  Atomic: the files go into a staging folder that
// replaces `path` once every rank has written; a failure anywhere leaves the previous checkpoint
// whole, and every rank gets the error.
void save_checkpoint(const std::string& path, ::torch::nn::Module& module, ::torch::optim::Optimizer& optimizer,
                     const CheckpointInfo& info = {});
// Loads into the module's tensors in place (a DDP's registered memory stays valid) and the
// optimizer's state; returns the info (world_size: the writer's).  A missing or damaged file, or a
// tensor of another shape or dtype, is pl::Error naming it.
CheckpointInfo load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                               ::torch::optim::Optimizer& optimizer);
bool checkpoint_exists(const std::string& path);  // a committed checkpoint is there

namespace detail {
void save_checkpoint(const std::string& path, ::torch::nn::Module& module, ::torch::optim::Optimizer* optimizer,
                     ZeroCore* zero, const CheckpointInfo& info);
CheckpointInfo load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                               ::torch::optim::Optimizer* optimizer, ZeroCore* zero);
}  // namespace detail

// The same with a ZeroRedundancyOptimizer: each rank writes its own partition; loading at another
// world size gives each rank the state of the parameters it owns now (whole parameters, or
// ddp_sharded's element ranges, each assembled from the saved ranges that overlap it).
template <class Opt>
void save_checkpoint(const std::string& path, ::torch::nn::Module& module, ZeroRedundancyOptimizer<Opt>& zero,
                     const CheckpointInfo& info = {}) {
  detail::save_checkpoint(path, module, nullptr, &zero.core(), info);
}
template <class Opt>
CheckpointInfo load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                               ZeroRedundancyOptimizer<Opt>& zero) {
  return detail::load_checkpoint(path, module, nullptr, &zero.core());
}

// The exit code for an exception that reached a libtorch program's main: 2 for bad input (a
// pl::Error of pl::is_bad_input's codes), 1 for anything else.
inline int exit_code_of(const std::exception& e) {
  const auto* pe = dynamic_cast<const pl::Error*>(&e);
  return pe != nullptr ? pl::exit_code_for(*pe) : pl::kExitFailure;
}

}  // namespace pl::torch
