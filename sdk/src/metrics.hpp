// What LightningModule::log collects: step values and epoch accumulators, their reduction across
// ranks, and the CSV file (Lightning's CSVLogger layout: lightning_logs/version_<n>/metrics.csv).
#pragma once

#include <plrt/pl_process_group.h>

#include <cstdint>
#include <limits>
#include <map>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/metric.hpp>
#include <plrt/sdk/scalar.hpp>
#include <string>
#include <vector>

#include "sdk_internal.hpp"
#include "strategy_handle.hpp"

namespace plrt::sdk {

// Blocking collectives of the trainer's metrics (log sync_dist, the epoch aggregation,
// LightningModule::all_gather, the checkpoint's RNG gather): the one place that decides how they
// run.  Through the strategy's reduce / all_gather entries (ABI 1.4) when it has them, so that it
// orders them with its own communication; else on its process group (api/group NULL and no
// entries: a world of one).  `strategy` NULL: the process group only.
class Collectives {
 public:
  Collectives(const PL_Host* host, const PL_ProcessGroupApi* api, PL_ProcessGroup* group, int world_size,
              StrategyHandle* strategy = nullptr)
      : host_(host),
        api_(api),
        group_(group),
        strategy_(strategy),
        world_(group || (strategy && (strategy->has_reduce() || strategy->has_all_gather())) ? world_size : 1) {}
  int world_size() const { return world_; }
  // Times the operations on the process group as "collective.<op>" (the strategy's route is timed
  // by its handle).
  Collectives& profiled(Profiler* p) {
    profiler_ = p;
    return *this;
  }
  void allreduce(std::vector<double>& values, PL_ReduceOp op) const;
  // Every rank's bytes (sizes may differ), in rank order.
  std::vector<std::string> allgather(const std::string& bytes) const;
  void allgather(const PL_Tensor& input, std::vector<PL_Tensor>& outputs) const;

 private:
  template <class Start>
  void run(const char* action, Start start) const;  // starts one operation and waits for it
  // The strategy's name and entry for an operation it lacks, with no process group either.
  [[noreturn]] void no_route(const char* op) const;
  const PL_Host* host_;
  const PL_ProcessGroupApi* api_;
  PL_ProcessGroup* group_;
  StrategyHandle* strategy_;
  int world_;
  Profiler* profiler_ = nullptr;
};

// The trainer's collectives as a pl::MetricSync (a metric's compute across the ranks).
class CollectivesSync : public MetricSync {
 public:
  explicit CollectivesSync(Collectives c) : c_(std::move(c)) {}
  int world_size() const override { return c_.world_size(); }
  std::vector<std::string> allgather(const std::string& bytes) const override { return c_.allgather(bytes); }

 private:
  Collectives c_;
};

// One epoch value's running reduction.  Values logged from steps wait in `pending` (with their
// weights, in log order) until fold() reads them: at the epoch's end, or when kMaxPending are
// waiting, so that a step logging a deferred loss does not wait for the device (scalar.hpp).
// Folding in log order gives the numbers an immediate read would have.
struct EpochAccumulator {
  static constexpr size_t kMaxPending = 1024;
  double weighted_sum = 0, weight = 0, sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  Reduce reduce = Reduce::Mean;
  bool sync = false;
  std::vector<std::pair<Scalar, double>> pending;
  void add(const Scalar& value, double weight);
  void fold();
};

class MetricLog {
 public:
  // `in_training_step`: Lightning's defaults differ there (on_step) and elsewhere (on_epoch).
  // A deferred value is read here only for sync_dist on a step (the reduction needs it now).
  void log(const std::string& name, const Scalar& value, const LogOptions& o, int64_t batch_size, bool in_training_step,
           int rank, const Collectives& c);
  // Step values logged since the last call (names with "_step" where on_epoch too), not read.
  std::map<std::string, Scalar> take_step_values();
  // A pl::Metric logged from a step (LightningModule::log(name, Metric&)): computed by the next
  // reduce_epoch, then reset.  The same name with another metric in one epoch is an error.
  void log_metric(const std::string& name, Metric& metric, const LogOptions& o);
  void forget_metrics() { metrics_.clear(); }  // a loop that ended early: its metrics are not logged
  // A loop run inside another (fit's validation inside a training epoch): park() takes the outer
  // loop's pending values out, leaving the log empty for the inner loop, and unpark() puts them
  // back once the inner loop has reduced and taken its own.
  struct Parked {
    std::map<std::string, Scalar> step;
    std::map<std::string, EpochAccumulator> epoch;
    std::map<std::string, Metric*> metrics;
  };
  Parked park() {
    Parked p{std::move(step_), std::move(epoch_), std::move(metrics_)};
    step_.clear(), epoch_.clear(), metrics_.clear();
    return p;
  }
  void unpark(Parked p) { step_ = std::move(p.step), epoch_ = std::move(p.epoch), metrics_ = std::move(p.metrics); }
  // Reduces the epoch accumulators and computes the metrics logged from steps (collective at world
  // size > 1: one all_gather of the names every rank logged, then one reduce per reduction and one
  // all_gather per metric; a rank without one of them takes part with nothing; every rank must
  // call it) and clears them.  Names get "_epoch" where on_step too.
  std::map<std::string, double> reduce_epoch(const Collectives& c);
  const std::vector<std::string>& prog_bar() const { return prog_bar_; }

 private:
  std::map<std::string, Scalar> step_;
  std::map<std::string, EpochAccumulator> epoch_;  // keyed by final name
  std::map<std::string, Metric*> metrics_;         // log_metric's, until reduce_epoch
  std::vector<std::string> prog_bar_;
};

// metrics.csv: one row per write, the union of columns so far; rewritten atomically each flush.
class CsvLog {
 public:
  void open(const std::string& path) { path_ = path; }
  bool is_open() const { return !path_.empty(); }
  // Continues the file at `path`: its rows whose step is before `before_step` are kept (a resumed
  // run logs the later ones again); a missing file is a fresh start.
  void open_existing(const std::string& path, int64_t before_step);
  void add_row(int64_t epoch, int64_t step, const std::map<std::string, double>& values);
  void flush() const;  // no-op when not opened

 private:
  std::string path_;
  std::vector<std::map<std::string, double>> rows_;
};

}  // namespace plrt::sdk
