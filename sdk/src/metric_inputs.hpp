// The metrics' input checks and host copies (torchmetrics.hpp): scores as float64, class ids as
// int64, top-1 predictions; every error names the metric, the argument and what would be valid.
#pragma once

#include <cstdint>
#include <plrt/sdk/tensor.hpp>
#include <string>
#include <vector>

namespace plrt::sdk::metric_inputs {

// f32/f64 values, all finite, as float64 (a device tensor is copied to the host).
std::vector<double> scores(const pl::Tensor& t, const std::string& metric, const char* arg);
// i32/i64 class ids in [0, num_classes), as int64; `t` must be 1-d.
std::vector<int64_t> labels(const pl::Tensor& t, int64_t num_classes, const std::string& metric, const char* arg);
// Top-1 class ids from preds [N, C] scores (first maximum) or [N] class ids.
std::vector<int64_t> top1(const pl::Tensor& preds, int64_t num_classes, const std::string& metric);
// Throws unless `a` and `b` have the same count.
void same_count(size_t a, size_t b, const std::string& metric, const char* what_a, const char* what_b);
// num_classes >= minimum.
void check_classes(int64_t num_classes, int64_t minimum, const std::string& metric);

}  // namespace plrt::sdk::metric_inputs
