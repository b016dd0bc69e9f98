// pl::Accuracy and pl::F1Score: counts of top-1 predictions (int64 Sum states, so the combination
// across ranks is exact).
#include <plrt/sdk/torchmetrics.hpp>

#include "metric_inputs.hpp"

namespace pl {

namespace in = plrt::sdk::metric_inputs;

namespace {
enum : size_t {
  kCorrect = 0,
  kTotal = 1
};
enum : size_t {
  kTp = 0,
  kFp = 1,
  kFn = 2
};

[[noreturn]] void no_samples(const std::string& metric) {
  throw Error(PL_ERR_INVALID_ARGUMENT, metric + ": compute() with no samples on any rank (call update() first)");
}
}  // namespace

Accuracy::Accuracy(int64_t num_classes) : Metric("Accuracy"), num_classes_(num_classes) {
  in::check_classes(num_classes, 2, name());
  add_int_state("correct", StateReduce::Sum, 1, 0);
  add_int_state("total", StateReduce::Sum, 1, 0);
}

void Accuracy::update(const Tensor& preds, const Tensor& target) {
  const std::vector<int64_t> p = in::top1(preds, num_classes_, name());
  const std::vector<int64_t> t = in::labels(target, num_classes_, name(), "target");
  in::same_count(p.size(), t.size(), name(), "preds", "target");
  int64_t correct = 0;
  for (size_t i = 0; i < p.size(); ++i) correct += p[i] == t[i];
  state(kCorrect).i64[0] += correct;
  state(kTotal).i64[0] += static_cast<int64_t>(t.size());
  count_update();
}

double Accuracy::compute_from(const std::vector<MetricState>& s) const {
  const int64_t total = s[kTotal].i64[0];
  if (total == 0) no_samples(name());
  return static_cast<double>(s[kCorrect].i64[0]) / static_cast<double>(total);
}

F1Score::F1Score(int64_t num_classes, Average average)
    : Metric(average == Average::Micro ? "F1Score(micro)" : "F1Score(macro)"),
      num_classes_(num_classes),
      average_(average) {
  in::check_classes(num_classes, 2, name());
  for (const char* n : {"tp", "fp", "fn"}) add_int_state(n, StateReduce::Sum, static_cast<size_t>(num_classes), 0);
}

void F1Score::update(const Tensor& preds, const Tensor& target) {
  const std::vector<int64_t> p = in::top1(preds, num_classes_, name());
  const std::vector<int64_t> t = in::labels(target, num_classes_, name(), "target");
  in::same_count(p.size(), t.size(), name(), "preds", "target");
  auto& tp = state(kTp).i64;
  auto& fp = state(kFp).i64;
  auto& fn = state(kFn).i64;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == t[i]) {
      ++tp[static_cast<size_t>(t[i])];
    } else {
      ++fp[static_cast<size_t>(p[i])];
      ++fn[static_cast<size_t>(t[i])];
    }
  }
  count_update();
}

double F1Score::compute_from(const std::vector<MetricState>& s) const {
  const auto& tp = s[kTp].i64;
  const auto& fp = s[kFp].i64;
  const auto& fn = s[kFn].i64;
  if (average_ == Average::Micro) {
    int64_t t = 0, f = 0;
    for (size_t c = 0; c < tp.size(); ++c) t += tp[c], f += fp[c] + fn[c];
    if (t + f == 0) no_samples(name());
    return 2.0 * static_cast<double>(t) / static_cast<double>(2 * t + f);
  }
  double sum = 0;
  int64_t present = 0;
  for (size_t c = 0; c < tp.size(); ++c) {
    const int64_t denom = 2 * tp[c] + fp[c] + fn[c];
    if (denom == 0) continue;  // absent from targets and predictions: left out of the mean
    sum += 2.0 * static_cast<double>(tp[c]) / static_cast<double>(denom);
    ++present;
  }
  if (present == 0) no_samples(name());
  return sum / static_cast<double>(present);
}

}  // namespace pl
