// pl::MeanSquaredError and pl::MeanMetric: float64 Sum states (summed in rank order across ranks)
// and their counts or weights.
#include <cmath>
#include <plrt/sdk/torchmetrics.hpp>

#include "metric_inputs.hpp"

namespace pl {

namespace in = plrt::sdk::metric_inputs;

namespace {
enum : size_t {
  kSum = 0,
  kCount = 1,
  kWeight = 1
};
}  // namespace

MeanSquaredError::MeanSquaredError() : Metric("MeanSquaredError") {
  add_state("sum_squared_error", StateReduce::Sum, 1, 0.0);
  add_int_state("total", StateReduce::Sum, 1, 0);
}

void MeanSquaredError::update(const Tensor& preds, const Tensor& target) {
  const std::vector<double> p = in::scores(preds, name(), "preds");
  const std::vector<double> t = in::scores(target, name(), "target");
  in::same_count(p.size(), t.size(), name(), "preds", "target");
  double sse = 0;
  for (size_t i = 0; i < p.size(); ++i) sse += (p[i] - t[i]) * (p[i] - t[i]);
  state(kSum).f64[0] += sse;
  state(kCount).i64[0] += static_cast<int64_t>(p.size());
  count_update();
}

double MeanSquaredError::compute_from(const std::vector<MetricState>& s) const {
  if (s[kCount].i64[0] == 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": compute() with no samples on any rank (call update() first)");
  return s[kSum].f64[0] / static_cast<double>(s[kCount].i64[0]);
}

MeanMetric::MeanMetric() : Metric("MeanMetric") {
  add_state("weighted_sum", StateReduce::Sum, 1, 0.0);
  add_state("weight", StateReduce::Sum, 1, 0.0);
}

void MeanMetric::update(double value, double weight) {
  if (!std::isfinite(value))
    throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": value " + std::to_string(value) + " is not finite");
  if (!std::isfinite(weight) || weight < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                name() + ": weight " + std::to_string(weight) + " is not valid: it must be finite and >= 0");
  state(kSum).f64[0] += value * weight;
  state(kWeight).f64[0] += weight;
  count_update();
}

void MeanMetric::update(const Tensor& values, const Tensor& weights) {
  const std::vector<double> v = in::scores(values, name(), "values");
  std::vector<double> w(v.size(), 1.0);
  if (weights.defined()) {
    w = in::scores(weights, name(), "weights");
    in::same_count(v.size(), w.size(), name(), "values", "weights");
    for (size_t i = 0; i < w.size(); ++i)
      if (w[i] < 0)
        throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": weights[" + std::to_string(i) + "] is " +
                                                 std::to_string(w[i]) + "; weights must be >= 0");
  }
  double sum = 0, weight = 0;
  for (size_t i = 0; i < v.size(); ++i) sum += v[i] * w[i], weight += w[i];
  state(kSum).f64[0] += sum;
  state(kWeight).f64[0] += weight;
  count_update();
}

double MeanMetric::compute_from(const std::vector<MetricState>& s) const {
  if (s[kWeight].f64[0] == 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, name() +
                                             ": compute() with a total weight of 0 on every rank (no update, "
                                             "or only zero weights)");
  return s[kSum].f64[0] / s[kWeight].f64[0];
}

}  // namespace pl
