// pl::GradientSync: a plrt strategy synchronising the gradients of parameters the program owns,
// for a program with its own model, autograd and optimizer (libtorch, say) that wants plrt's
// strategies (ddp, bagua, ...) without pl::Trainer.  It does what the Trainer does around the
// strategy and nothing else: the job from the knobs (and plrun's PL_TRAINER_* variables), the
// launcher's rank and world size, the accelerator, the store, the strategy; then the step's
// entries in the order the strategy's C ABI (pl_strategy.h) asks for them:
//
//   GradientSync sync;                         job, launcher, store, strategy (create)
//   sync.setup(params);                        views of the program's tensors; ddp: rank 0's values
//                                              broadcast into them
//   each step:
//     sync.backward([&] {                      the strategy's run_step (ddp: rank 0's buffers first)
//       loss = forward(); loss.backward();     ... a hook calls sync.grad_ready(i) as each gradient
//     });                                      is final; then after_backward: every gradient is the
//                                              ranks' mean (in place, in the program's memory)
//     sync.optimizer_step([&](ranges) {        before_optimizer_step, the strategy's optimizer_step
//       optimizer.step();                      (the ranges this rank updates), after_optimizer_step
//     });
//     zero the gradients in place              (the registered grad memory must stay the same)
//
// The registered memory is borrowed until teardown: the program keeps its tensors (and their
// gradients) allocated at the same addresses, and updates them in place.  Strategies that drive
// several replicas in one process (dp, ddp2) or spawn their own workers (ddp_spawn) need a module
// the SDK can copy or run, and are refused here by name.
#pragma once

#include <plrt/pl_strategy.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/devices.hpp>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/options.hpp>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <vector>

namespace pl {

struct GradientSyncOptions {
  std::string accelerator = "cpu";  // where the program's tensors live ("cpu", "cuda", "auto")
  Devices devices = Devices::automatic();
  std::string strategy = "auto";
  int num_nodes = 1;
  std::string process_group_backend;     // empty: nccl on cuda, gloo otherwise
  OptionList strategy_options;           // e.g. bucket_cap_mb; after the alias's presets
  OptionList accelerator_options;        // e.g. num_threads (cpu: the cores shared by the local processes)
  std::chrono::milliseconds timeout{0};  // collectives and the store; 0: their defaults
  // PL_TRAINER_ACCELERATOR, _DEVICES, _STRATEGY, _NUM_NODES, _PROCESS_GROUP_BACKEND and
  // _STRATEGY_OPTIONS (what plrun sets from its command line) override the fields above.
  bool read_env = true;
  // Where this process stands in its job; default: ClusterEnv::detect() (the launcher's variables).
  // Set it to run several ranks in one process (threads), as the tests do.
  std::optional<ClusterEnv> cluster;
  RuntimeOptions runtime;
};

// One entry of the program's state, as views (PL_Tensor: dlpack.hpp makes them from DLPack).
struct ExternalParameter {
  std::string name;                        // unique, non-empty (a checkpoint's key, an error's subject)
  PL_Tensor value{};                       // compact row-major; memory borrowed until teardown
  PL_Tensor grad{};                        // TRAINABLE only: value's shape, dtype and device, borrowed too
  PL_ParamKind kind = PL_PARAM_TRAINABLE;  // FROZEN / BUFFER: no gradient (grad ignored)
};

// What the strategy asked of the program's optimizer in bind_optimizer (ABI 1.6/1.7).
struct OptimizerRequests {
  double lr_scale = 1.0;                   // multiply the learning rate by it (horovod's scale_lr)
  std::string lr_scale_reason;             // the strategy's words for it
  bool broadcast_optimizer_state = false;  // make rank 0's optimizer state every rank's before step 1
};

class JobContext;  // job_context.hpp

class GradientSync {
 public:
  // Resolves the job and makes the strategy; bad knobs, a launcher that disagrees with them, or a
  // strategy this class cannot drive: pl::Error (PL_ERR_INVALID_ARGUMENT) before any work.
  explicit GradientSync(GradientSyncOptions options = {});
  // A strategy for a job already set up (one JobContext, several strategies: one per model).
  struct Choice {
    std::string strategy;               // empty: the context's
    std::string process_group_backend;  // empty: the context's (plrun's --process-group-backend wins)
    OptionList strategy_options;        // under the context's (plrun's) when the strategy is the context's
    // Empty for the job's first strategy; each further strategy in the process names its own key
    // space in the job's store (every rank the same names in the same order).
    std::string instance;
  };
  GradientSync(std::shared_ptr<JobContext> context, Choice choice);
  std::shared_ptr<JobContext> context() const;
  ~GradientSync();  // tears the strategy down (errors logged, never thrown)
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  int node_rank() const;
  PL_Device device() const;  // where the parameters must live (cpu: {PL_DEVICE_CPU, 0})
  const JobConfig& job() const;
  const std::string& launcher() const;  // "plrun", "torchrun", ..., "none"

  // Registers the parameters (once; every rank the same names, shapes and dtypes, in the same
  // order) and makes the ranks agree (ddp: rank 0's values and buffers broadcast into them).  A bad
  // entry (no name or a repeated one, no memory, a gradient of another shape, dtype or device, a
  // tensor on another device than device()) is pl::Error naming it, before the strategy sees any.
  void setup(std::vector<ExternalParameter> params);
  const std::vector<ExternalParameter>& parameters() const;

  // Tells the strategy the program's optimizer (name and hyperparameters as text; steps already
  // taken), once, after setup and before the first step, and returns what the strategy asks of it,
  // which the program applies (horovod: the learning rate x world size, rank 0's optimizer state).
  // A strategy that needs a particular optimizer refuses another here; one that would have the SDK
  // form the optimizer's first moment in the gradients (bagua's qadam) is refused, since the
  // optimizer is the program's.  Without this call, the first backward binds an optimizer named
  // "external" and refuses to go on if the strategy asks anything of it.
  OptimizerRequests bind_optimizer(const std::string& name, const OptionList& hyperparameters = {}, int64_t steps = 0);

  // One forward and backward, run by the strategy (ddp broadcasts rank 0's buffers first), then
  // after_backward: with grad sync on, every trainable gradient holds the strategy's reduction (ddp:
  // the ranks' mean) when it returns; gradients never reported with grad_ready are reduced then.
  // An exception thrown by forward_backward is rethrown as it is, after_backward not called: the
  // strategy's step may be left unfinished (ddp refuses the next backward once a gradient was
  // reported, and the other ranks wait for this one's), so the program should tear down.
  void backward(const std::function<void()>& forward_backward);
  // backward's two halves, for a program whose backward ends on its own (plrt::torch ends it from
  // autograd's final callback): run_step runs `fn` (a forward) as the strategy's step (ddp: rank
  // 0's buffers broadcast first, unless its option broadcast_buffers is false), the gradients are
  // then reported with grad_ready as backward finishes them, and finish_backward is after_backward.
  void run_step(const std::function<void()>& fn);
  void finish_backward();
  // Inside backward's function: params[index]'s gradient is final (an autograd hook calls it),
  // so the strategy may start its bucket's communication while backward goes on.
  void grad_ready(size_t index);
  // Gradient accumulation (torch's no_sync): off keeps each rank's gradients local.
  void set_grad_sync(bool on);

  // The optimizer step: before_optimizer_step, then `step` with the element ranges (indices into
  // setup's array) this rank updates (ddp: every trainable parameter whole; a sharded strategy:
  // its shard, after which it gathers the values), then after_optimizer_step.  `step` updates the
  // values in place; an exception from it is rethrown.
  using StepFn = std::function<void(const std::vector<ParamRange>& ranges)>;
  void optimizer_step(const StepFn& step);
  // Makes the ranks' weights equal now (strategies whose ranks drift apart: bagua's async); a
  // collective, between steps.  Nothing for strategies whose ranks never drift.
  void sync_weights();

  // `values` becomes op over every rank's (the strategy's metrics route): e.g. the mean loss.
  void all_reduce(std::vector<double>& values, PL_ReduceOp op);
  double stat(const std::string& name) const;  // the strategy's get_stat

  // After setup: whether the strategy shards the optimizer state (ddp_sharded), and the element
  // ranges of setup's array this rank owns (every trainable entry whole when it does not shard).
  bool shards() const;
  std::vector<ParamRange> owned_ranges() const;
  // After setup: whether every optimizer step must go through optimizer_step: the strategy shards,
  // or acts before or after the step (bagua's decentralized algorithms exchange weights there,
  // async pauses its averaging thread).  False for ddp and horovod: stepping the optimizer
  // directly is the same as optimizer_step there.
  bool owns_step() const;

  void teardown();  // idempotent; the registered memory is free again afterwards

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pl
