// The metrics' input checks and host copies: see metric_inputs.hpp.
#include "metric_inputs.hpp"

#include <cmath>

namespace plrt::sdk::metric_inputs {

using pl::Error;
using pl::Tensor;

namespace {

[[noreturn]] void bad(const std::string& metric, const std::string& text) {
  throw Error(PL_ERR_INVALID_ARGUMENT, metric + ": " + text);
}

Tensor host_of(const Tensor& t, const std::string& metric, const char* arg) {
  if (!t.defined()) bad(metric, std::string(arg) + " is an undefined tensor");
  return t.is_host() ? t : t.to_host();
}

}  // namespace

std::vector<double> scores(const Tensor& t, const std::string& metric, const char* arg) {
  Tensor h = host_of(t, metric, arg);
  std::vector<double> out;
  if (h.dtype() == PL_F64)
    out = h.to_vector<double>();
  else if (h.dtype() == PL_F32)
    for (float v : h.to_vector<float>()) out.push_back(v);
  else
    bad(metric, std::string(arg) + " has dtype " + pl_dtype_name(h.dtype()) + "; scores must be float32 or float64");
  for (size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i]))
      bad(metric,
          std::string(arg) + "[" + std::to_string(i) + "] is " + std::to_string(out[i]) + "; scores must be finite");
  return out;
}

std::vector<int64_t> labels(const Tensor& t, int64_t num_classes, const std::string& metric, const char* arg) {
  Tensor h = host_of(t, metric, arg);
  if (h.dim() != 1) bad(metric, std::string(arg) + " has shape " + pl::shape_text(h.shape()) + "; class ids are [N]");
  std::vector<int64_t> out;
  if (h.dtype() == PL_I64)
    out = h.to_vector<int64_t>();
  else if (h.dtype() == PL_I32)
    for (int32_t v : h.to_vector<int32_t>()) out.push_back(v);
  else
    bad(metric, std::string(arg) + " has dtype " + pl_dtype_name(h.dtype()) + "; class ids must be int32 or int64");
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] < 0 || out[i] >= num_classes)
      bad(metric, std::string(arg) + "[" + std::to_string(i) + "] is " + std::to_string(out[i]) +
                      "; class ids must be in [0, " + std::to_string(num_classes) + ")");
  return out;
}

std::vector<int64_t> top1(const Tensor& preds, int64_t num_classes, const std::string& metric) {
  if (preds.defined() && (preds.dtype() == PL_I32 || preds.dtype() == PL_I64))
    return labels(preds, num_classes, metric, "preds");
  if (!preds.defined() || preds.dim() != 2 || preds.size(1) != num_classes)
    bad(metric, "preds has shape " + (preds.defined() ? pl::shape_text(preds.shape()) : std::string("(undefined)")) +
                    "; it must be [N, " + std::to_string(num_classes) + "] scores or [N] class ids");
  const std::vector<double> s = scores(preds, metric, "preds");
  const size_t c = static_cast<size_t>(num_classes);
  std::vector<int64_t> out(s.size() / c);
  for (size_t i = 0; i < out.size(); ++i) {
    size_t best = 0;
    for (size_t j = 1; j < c; ++j)
      if (s[i * c + j] > s[i * c + best]) best = j;
    out[i] = static_cast<int64_t>(best);
  }
  return out;
}

void same_count(size_t a, size_t b, const std::string& metric, const char* what_a, const char* what_b) {
  if (a != b)
    bad(metric, std::string(what_a) + " has " + std::to_string(a) + " samples but " + what_b + " has " +
                    std::to_string(b) + "; they must match");
}

void check_classes(int64_t num_classes, int64_t minimum, const std::string& metric) {
  if (num_classes < minimum)
    bad(metric,
        "num_classes=" + std::to_string(num_classes) + " is not valid: it must be >= " + std::to_string(minimum));
}

}  // namespace plrt::sdk::metric_inputs
