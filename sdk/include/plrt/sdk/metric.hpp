// pl::Metric: TorchMetrics' model of a metric with synced state.  A metric registers its states
// with their reduction across ranks (sum, max, min, cat); update() folds a batch into this rank's
// states; compute() first combines every rank's states exactly (one all-gather of the states per
// compute, reduced in rank order on every rank, so uneven shards and empty ranks work), then
// computes the value from the combined states; reset() starts again (per epoch).  The local
// states are kept as they were, so compute() may be called again after more updates.
// Without a sync (or at world size 1) compute() is local.  The metrics themselves are in
// torchmetrics.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <plrt/sdk/process_group.hpp>
#include <string>
#include <vector>

namespace pl {

// How compute() reaches the other ranks.  Every rank must call compute() (it is collective).
class MetricSync {
 public:
  virtual ~MetricSync() = default;
  virtual int world_size() const = 0;
  // Every rank's bytes (sizes may differ), in rank order.  Collective; bounded by the route's timeout.
  virtual std::vector<std::string> allgather(const std::string& bytes) const = 0;
};

// A MetricSync over a pl::ProcessGroup (sizes first, then the bytes).  The group must outlive it.
class ProcessGroupSync : public MetricSync {
 public:
  explicit ProcessGroupSync(const ProcessGroup& group) : group_(group) {}
  int world_size() const override { return group_.world_size(); }
  std::vector<std::string> allgather(const std::string& bytes) const override;

 private:
  const ProcessGroup& group_;
};

// How a state is combined across ranks (TorchMetrics' dist_reduce_fx).
enum class StateReduce {
  Sum,  // element-wise; float64 states are summed in rank order, int64 ones exactly
  Max,  // element-wise
  Min,  // element-wise
  Cat   // concatenated in rank order (per-rank lengths may differ)
};

// One registered state: float64 or int64 values (the other vector stays empty).
struct MetricState {
  std::string name;
  StateReduce reduce = StateReduce::Sum;
  bool is_int = false;
  std::vector<double> f64;
  std::vector<int64_t> i64;
  // the values reset() restores (a Cat state resets to empty)
  std::vector<double> f64_default;
  std::vector<int64_t> i64_default;
};

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric() = default;
  Metric(const Metric&) = default;
  Metric& operator=(const Metric&) = default;

  const std::string& name() const { return name_; }
  // The route compute() uses; none (the default): local.  `sync` must outlive the metric's computes.
  void set_sync(std::shared_ptr<const MetricSync> sync) { sync_ = std::move(sync); }
  // compute() on the states of every rank of `sync`'s world (collective), or the local ones.
  double compute();
  double compute(const MetricSync& sync);
  // Back to the registered defaults (TorchMetrics' reset, once per epoch).
  void reset();
  // Calls of update() since the last reset, on this rank.
  int64_t update_count() const { return update_count_; }
  const std::vector<MetricState>& states() const { return states_; }

 protected:
  // Registers a state of `size` elements set to `value` (Cat: size 0).  Returns its index.
  size_t add_state(const std::string& name, StateReduce reduce, size_t size, double value);
  size_t add_int_state(const std::string& name, StateReduce reduce, size_t size, int64_t value);
  MetricState& state(size_t i) { return states_.at(i); }
  // The value from states combined across ranks (`states` has the layout registered).
  virtual double compute_from(const std::vector<MetricState>& states) const = 0;
  // Subclasses call it at the end of each update().
  void count_update() { ++update_count_; }

 private:
  std::vector<MetricState> combined(const MetricSync& sync) const;
  std::string name_;
  std::vector<MetricState> states_;
  std::shared_ptr<const MetricSync> sync_;
  int64_t update_count_ = 0;
};

namespace detail {
// The states' bytes, and every rank's bytes folded back into one set of states (rank order);
// throws PL_ERR_INVALID_ARGUMENT when a rank's layout differs (another metric, other sizes).
std::string encode_states(const std::vector<MetricState>& states);
std::vector<MetricState> reduce_states(const std::vector<MetricState>& layout, const std::vector<std::string>& ranks,
                                       const std::string& metric);
}  // namespace detail

}  // namespace pl
