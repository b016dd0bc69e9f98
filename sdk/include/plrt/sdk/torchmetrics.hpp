// TorchMetrics' common metrics on pl::Metric (metric.hpp): update() per batch on host or device
// tensors (device ones are copied to the host), compute() combined exactly across ranks, reset()
// per epoch.  Each equals the single-process value on the union of every rank's data, and
// scikit-learn's metric on the same arrays (tests/sdk/test_torchmetrics_sklearn.cpp).
// Bad input (shapes, dtypes, labels out of range, non-finite values) is refused before any state
// changes; a compute() over no data at all is refused by name.
#pragma once

#include <plrt/sdk/metric.hpp>
#include <plrt/sdk/tensor.hpp>

namespace pl {

// Multiclass top-1 accuracy.  preds: [N, C] scores (f32/f64: logits or probabilities; the first
// maximum wins, as torch.argmax) or [N] class ids (i32/i64); target: [N] class ids in [0, C).
class Accuracy : public Metric {
 public:
  explicit Accuracy(int64_t num_classes);
  void update(const Tensor& preds, const Tensor& target);

 protected:
  double compute_from(const std::vector<MetricState>& s) const override;

 private:
  int64_t num_classes_;
};

// Multiclass F1 on top-1 predictions (inputs as Accuracy's).  Micro: 2·TP / (2·TP + FP + FN) over
// all classes.  Macro: the mean of each class's F1 over the classes that occur in the targets or
// the predictions (TP + FP + FN > 0); a class absent from both is left out, as TorchMetrics'
// multiclass_f1_score does and as scikit-learn's f1_score does without `labels`.  No division by
// zero is left: a class that occurs has 2·TP + FP + FN > 0.
class F1Score : public Metric {
 public:
  enum class Average {
    Micro,
    Macro
  };
  F1Score(int64_t num_classes, Average average = Average::Macro);
  void update(const Tensor& preds, const Tensor& target);

 protected:
  double compute_from(const std::vector<MetricState>& s) const override;

 private:
  int64_t num_classes_;
  Average average_;
};

// Area under the ROC curve, exact: the scores are kept (a Cat state) and the trapezoidal area over
// every distinct threshold is computed in integer arithmetic (tied scores form one step, as in
// scikit-learn's roc_curve), rounded once.
// num_classes == 2 (binary): preds [N] scores of the positive class (f32/f64), target [N] in {0, 1}.
// num_classes > 2 (one-vs-rest, macro): preds [N, C] scores, target [N] in [0, C); the mean of the
// C binary AUROCs of column c against (target == c).
// A class with no positive or no negative sample in the union has no AUROC: compute() throws, as
// scikit-learn's roc_auc_score raises.
class AUROC : public Metric {
 public:
  explicit AUROC(int64_t num_classes = 2);
  void update(const Tensor& preds, const Tensor& target);

 protected:
  double compute_from(const std::vector<MetricState>& s) const override;

 private:
  int64_t num_classes_;
};

// mean((preds - target)^2) over every element; preds and target f32/f64 of the same numel.
class MeanSquaredError : public Metric {
 public:
  MeanSquaredError();
  void update(const Tensor& preds, const Tensor& target);

 protected:
  double compute_from(const std::vector<MetricState>& s) const override;
};

// The weighted mean sum(value·weight) / sum(weight) (TorchMetrics' MeanMetric).  Weights must be
// finite and >= 0; values finite.
class MeanMetric : public Metric {
 public:
  MeanMetric();
  void update(double value, double weight = 1.0);
  // values f32/f64; weights empty (all 1) or of the same numel.
  void update(const Tensor& values, const Tensor& weights = Tensor());

 protected:
  double compute_from(const std::vector<MetricState>& s) const override;
};

}  // namespace pl
