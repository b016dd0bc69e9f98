// pl::AUROC: the scores and targets kept as Cat states (every rank's, in rank order, at compute);
// the ROC area over every distinct threshold, in integer arithmetic, rounded once.
#include <algorithm>
#include <numeric>
#include <plrt/sdk/torchmetrics.hpp>

#include "metric_inputs.hpp"

namespace pl {

namespace in = plrt::sdk::metric_inputs;

namespace {
enum : size_t {
  kScores = 0,
  kTarget = 1
};
__extension__ typedef unsigned __int128 u128;

// The binary AUROC of scores[i * stride + column] against positive[i]; throws when the samples
// are all positive or all negative.
double binary_auroc(const std::vector<double>& scores, size_t stride, size_t column, const std::vector<bool>& positive,
                    const std::string& metric, const std::string& which) {
  const size_t n = positive.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  auto score = [&](size_t i) { return scores[i * stride + column]; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score(a) > score(b); });
  uint64_t tp = 0, fp = 0;
  u128 twice_area = 0;  // sum over threshold steps of d(fp) * (tp_before + tp_after)
  for (size_t i = 0; i < n;) {
    const double s = score(order[i]);
    const uint64_t tp0 = tp, fp0 = fp;
    for (; i < n && score(order[i]) == s; ++i) positive[order[i]] ? ++tp : ++fp;  // ties: one step
    twice_area += static_cast<u128>(fp - fp0) * (tp0 + tp);
  }
  if (tp == 0 || fp == 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, metric + ": " + which + " has " + (tp == 0 ? "no positive" : "no negative") +
                                             " sample among the " + std::to_string(n) +
                                             " of every rank, so its ROC AUC is not defined");
  return static_cast<double>(twice_area) / (2.0 * static_cast<double>(tp) * static_cast<double>(fp));
}
}  // namespace

AUROC::AUROC(int64_t num_classes) : Metric("AUROC"), num_classes_(num_classes) {
  in::check_classes(num_classes, 2, name());
  add_state("scores", StateReduce::Cat, 0, 0.0);
  add_int_state("target", StateReduce::Cat, 0, 0);
}

void AUROC::update(const Tensor& preds, const Tensor& target) {
  const std::vector<int64_t> t = in::labels(target, num_classes_, name(), "target");
  const bool binary = num_classes_ == 2;
  const std::string want =
      binary ? "[N] scores of the positive class" : "[N, " + std::to_string(num_classes_) + "] scores";
  if (!preds.defined() || (binary ? preds.dim() != 1 : (preds.dim() != 2 || preds.size(1) != num_classes_)))
    throw Error(PL_ERR_INVALID_ARGUMENT,
                name() + ": preds has shape " +
                    (preds.defined() ? shape_text(preds.shape()) : std::string("(undefined)")) + "; it must be " +
                    want);
  const std::vector<double> s = in::scores(preds, name(), "preds");
  in::same_count(binary ? s.size() : static_cast<size_t>(preds.size(0)), t.size(), name(), "preds", "target");
  auto& ss = state(kScores).f64;
  ss.insert(ss.end(), s.begin(), s.end());
  auto& ts = state(kTarget).i64;
  ts.insert(ts.end(), t.begin(), t.end());
  count_update();
}

double AUROC::compute_from(const std::vector<MetricState>& s) const {
  const auto& scores = s[kScores].f64;
  const auto& target = s[kTarget].i64;
  if (target.empty())
    throw Error(PL_ERR_INVALID_ARGUMENT, name() + ": compute() with no samples on any rank (call update() first)");
  std::vector<bool> positive(target.size());
  if (num_classes_ == 2) {
    for (size_t i = 0; i < target.size(); ++i) positive[i] = target[i] == 1;
    return binary_auroc(scores, 1, 0, positive, name(), "the target");
  }
  double sum = 0;
  for (int64_t c = 0; c < num_classes_; ++c) {
    for (size_t i = 0; i < target.size(); ++i) positive[i] = target[i] == c;
    sum += binary_auroc(scores, static_cast<size_t>(num_classes_), static_cast<size_t>(c), positive, name(),
                        "class " + std::to_string(c));
  }
  return sum / static_cast<double>(num_classes_);
}

}  // namespace pl
