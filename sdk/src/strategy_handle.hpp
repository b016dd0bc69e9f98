// The trainer's side of a strategy plugin: one PL_Strategy instance driven through its C table.
// Exceptions thrown by the step function (user code) and by the optimizer step are carried across
// the plugin's C frames as an exception_ptr and rethrown here, never unwound through C.  An
// optional entry past the plugin's table (a plugin built for an older minor) reads as absent.
#pragma once

#include <plrt/pl_strategy.h>

#include <cstdint>
#include <functional>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <vector>

#include "profiler.hpp"
#include "sdk_internal.hpp"

namespace plrt::sdk {

struct StrategySetup {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0, num_nodes = 1;
  std::vector<int32_t> device_ids;
  std::string process_group_backend;
  PL_Store* store = nullptr;
  int64_t timeout_ms = 0;
  std::vector<std::pair<std::string, std::string>> options;  // presets, then the user's
};

class StrategyHandle {
 public:
  StrategyHandle() = default;
  ~StrategyHandle();
  StrategyHandle(const StrategyHandle&) = delete;
  StrategyHandle& operator=(const StrategyHandle&) = delete;

  void create(const Runtime& rt, const std::string& name, const Accelerator& acc, const StrategySetup& s);
  bool created() const { return s_ != nullptr; }
  const std::string& name() const { return name_; }
  void setup(std::vector<PL_Parameter>& params);
  // Runs `step` as the strategy's replica function: once per replica it drives (dp, ddp2: one per
  // device, concurrently, each in its own thread).  An exception thrown by a replica's step is
  // rethrown here (the lowest replica's, when several throw).
  using ReplicaStep = std::function<void(int replica, int num_replicas, PL_Device device)>;
  void run_step(const ReplicaStep& step);
  // ABI 1.3: replicas per process (1 when the strategy does not say), and a replica's registration.
  int num_replicas() const;
  void setup_replica(int replica, std::vector<PL_Parameter>& params);
  void on_grad_ready(size_t index);
  void after_backward();
  void set_grad_sync(bool on);
  void before_optimizer_step();
  void after_optimizer_step();
  // Whether the strategy has either entry: it acts around the optimizer step (bagua's weight
  // algorithms), so a host must not step the optimizer behind its back.
  bool has_step_hooks() const;

  // ---- ABI 1.4 (has_*: the strategy implements the entry; else the caller's fallback) ----
  // optimizer_step: `step` is the host's optimizer on the ranges the strategy names; it must be
  // called exactly once (a strategy that skips it or calls it again is an error).
  bool has_optimizer_step() const;
  using OptimizerStep = std::function<void(const PL_ParamRange* ranges, size_t num_ranges)>;
  void optimizer_step(const OptimizerStep& step);
  bool has_agree_skip() const;
  bool agree_skip(bool found_inf);
  bool has_reduce() const;
  bool has_all_gather() const;
  void reduce(PL_Tensor& tensor, PL_ReduceOp op);
  void all_gather(const PL_Tensor& input, std::vector<PL_Tensor>& outputs);
  PL_StrategyStateInfo state_info() const;  // has_state 0 when the strategy has no state_info entry
  void save_state(const std::string& dir);
  void load_state(const std::string& dir, int saved_world_size);

  // ---- ABI 1.5 ----
  // owned_ranges: the ranges of setup's array this rank owns (a partition across ranks), checked
  // (struct size, index, kind, bounds); empty vector and has_owned_ranges() false when the strategy
  // does not shard.
  bool has_owned_ranges() const;
  std::vector<PL_ParamRange> owned_ranges(const std::vector<PL_Parameter>& params) const;

  // ---- ABI 1.6 ----
  // What a strategy asks of the optimizer in bind_optimizer (all off without the entry).
  struct OptimizerRequests {
    bool first_moment_in_grads = false;      // 1.6
    double lr_scale = 1.0;                   // 1.7 (0 from the strategy reads as 1)
    std::string lr_scale_reason;             // 1.7, for the log line
    bool broadcast_optimizer_state = false;  // 1.7
  };
  // bind_optimizer: tells the strategy the optimizer (name, hyperparameters, steps taken) and
  // returns what it asks for.
  OptimizerRequests bind_optimizer(const std::string& name,
                                   const std::vector<std::pair<std::string, std::string>>& hyper, int64_t steps);
  // sync_weights: every rank's weights made equal and left alone until the next step (a collective,
  // between steps); nothing when the strategy lacks the entry (its ranks never drift apart).
  void sync_weights();

  void teardown();  // idempotent
  // The group for metrics; api/group NULL when the strategy runs alone.
  const PL_ProcessGroupApi* pg_api() const { return pg_api_; }
  PL_ProcessGroup* pg() const { return pg_; }
  double stat(const std::string& name) const;
  // Times each call into the plugin as "[Strategy]<name>.<entry>" (not on_grad_ready and
  // set_grad_sync, called per parameter or per batch for nothing but a flag); null: none.
  void set_profiler(Profiler* p) { profiler_ = p; }

 private:
  Profiler::Span span(const char* entry) const {
    const bool on = profiler_ && profiler_->on();
    return Profiler::Span(on ? profiler_ : nullptr, on ? "[Strategy]" + name_ + "." + entry : std::string());
  }
  // create's warning for a strategy that asks for a process group and answers none.
  void warn_without_group(const std::string& path, const PL_OptionList& options) const;

  const PL_Host* host_ = nullptr;
  const PL_StrategyApi* api_ = nullptr;
  PL_Strategy* s_ = nullptr;
  std::string name_;
  bool torn_down_ = true;
  const PL_ProcessGroupApi* pg_api_ = nullptr;
  PL_ProcessGroup* pg_ = nullptr;
  Profiler* profiler_ = nullptr;
};

}  // namespace plrt::sdk
