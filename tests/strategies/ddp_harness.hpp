// Shared by the ddp tests (in-process) and ddp_worker (one rank of a multi-process job): a ddp-family
// strategy instance driven through its plugin's C table (strategy_harness.hpp, with ddp's run_step),
// and a small model of named parameters with host storage and values chosen so that every mean the
// tests expect is exact in float32.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <plrt/sdk/process_group.hpp>  // pl::tensor_view
#include <string>
#include <utility>
#include <vector>

#include "strategy_harness.hpp"

namespace ddptest {

using strattest::runtime_options;
using StrategyConfig = strattest::Config;

// A ddp-family instance (ranks as processes on one node); every call throws pl::Error.
class Strategy : public strattest::Strategy {
 public:
  Strategy(const pl::Runtime& rt, const std::string& name, const StrategyConfig& c)
      : strattest::Strategy(rt, name, c, strattest::Layout::kOneNode) {}

  // fn(device, params, num_params) is the replica's forward+backward; what it throws is rethrown.
  void run_step(std::function<void(PL_Device, PL_Parameter*, size_t)> fn) {
    struct Call {
      std::function<void(PL_Device, PL_Parameter*, size_t)> fn;
      const PL_Host* host;
      std::exception_ptr thrown;  // no exception crosses the plugin: it is rethrown here
    } call{std::move(fn), host_, nullptr};
    PL_ReplicaStepFn f{};
    f.struct_size = sizeof f;
    f.user = &call;
    f.run = [](void* user, int32_t, int32_t, PL_Device d, PL_Parameter* p, size_t n) -> PL_Error* {
      auto* c = static_cast<Call*>(user);
      try {
        c->fn(d, p, n);
        return nullptr;
      } catch (...) {
        c->thrown = std::current_exception();
        return c->host->error_new(PL_ERR_RUNTIME, "the test's step function threw");
      }
    };
    PL_Error* e = api_->run_step(s_, &f);
    if (call.thrown) {
      if (e) host_->error_destroy(e);
      std::rethrow_exception(call.thrown);
    }
    pl::check(host_, e);
  }
};

struct ParamSpec {
  std::string name;
  PL_DType dtype;
  int64_t numel;
  bool requires_grad;
  PL_ParamKind kind = 0;  // 0: none sent (requires_grad decides, as a 1.3 host)
};

// The tests' module: gradients of several sizes (one of 4000 bytes, larger than a 0.001 MiB
// bucket), a buffer in the middle, and one float64 parameter (a bucket holds one dtype).
inline std::vector<ParamSpec> standard_specs() {
  return {{"layer0.weight", PL_F32, 300, true},  {"layer0.bias", PL_F32, 7, true},
          {"bn.running_mean", PL_F32, 5, false}, {"layer1.weight", PL_F32, 1000, true},
          {"layer1.bias", PL_F32, 3, true},      {"layer2.weight", PL_F32, 50, true},
          {"layer2.bias", PL_F32, 4, true},      {"head.weight", PL_F64, 40, true}};
}
// Buckets of standard_specs() with both caps at 0.001 MiB (1048 bytes), in reverse order:
// [head.weight] (f64), [layer2.bias, layer2.weight, layer1.bias], [layer1.weight], [layer0.bias],
// [layer0.weight].  With first_bucket_cap_mb 1 and bucket_cap_mb 0.001: one f32 bucket and one f64.
constexpr int kSmallCapBuckets = 5;
constexpr int kDefaultCapBuckets = 2;

// Values chosen exactly representable, and sums/means of them too.
inline double init_value(size_t p, int64_t j, int rank) { return p * 1000.0 + j * 0.5 + rank * 7.0; }
inline double grad_value(size_t p, int64_t j, int rank, int step) {
  return (rank + 1.0) * static_cast<double>(j % 5 + 1 + static_cast<int64_t>(p)) * (step % 4 + 1);
}
inline double buffer_value(int64_t j, int rank, int step) { return 100.0 * step + j + rank * 0.25; }

// Parameters with host storage (values and grads), as a module would own them.
class Model {
 public:
  explicit Model(std::vector<ParamSpec> specs) : specs_(std::move(specs)), value_(specs_.size()), grad_(specs_.size()) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const size_t bytes = static_cast<size_t>(specs_[i].numel) * pl_dtype_size(specs_[i].dtype);
      value_[i].assign(bytes + 8, 0);
      grad_[i].assign(bytes + 8, 0);
      PL_Parameter p{};
      p.struct_size = sizeof p;
      p.name = specs_[i].name.c_str();
      p.value = pl::tensor_view(value_[i].data(), specs_[i].dtype, specs_[i].numel);
      p.grad = pl::tensor_view(grad_[i].data(), specs_[i].dtype, specs_[i].numel);
      p.requires_grad = specs_[i].requires_grad ? 1 : 0;
      p.kind = specs_[i].kind;
      params_.push_back(p);
    }
  }
  size_t size() const { return specs_.size(); }
  const ParamSpec& spec(size_t i) const { return specs_[i]; }
  std::vector<PL_Parameter>& params() { return params_; }
  double value(size_t i, int64_t j) const { return get(value_[i], specs_[i].dtype, j); }
  double grad(size_t i, int64_t j) const { return get(grad_[i], specs_[i].dtype, j); }
  void set_value(size_t i, int64_t j, double v) { put(value_[i], specs_[i].dtype, j, v); }
  void set_grad(size_t i, int64_t j, double v) { put(grad_[i], specs_[i].dtype, j, v); }
  void zero_grads() {
    for (auto& g : grad_) std::fill(g.begin(), g.end(), 0);
  }
  size_t grad_bytes() const {
    size_t n = 0;
    for (const auto& s : specs_)
      if (s.requires_grad) n += static_cast<size_t>(s.numel) * pl_dtype_size(s.dtype);
    return n;
  }

 private:
  static double get(const std::vector<uint8_t>& b, PL_DType dt, int64_t j) {
    if (dt == PL_F64) {
      double v;
      std::memcpy(&v, b.data() + j * 8, 8);
      return v;
    }
    float v;
    std::memcpy(&v, b.data() + j * 4, 4);
    return v;
  }
  static void put(std::vector<uint8_t>& b, PL_DType dt, int64_t j, double v) {
    if (dt == PL_F64) {
      std::memcpy(b.data() + j * 8, &v, 8);
      return;
    }
    const float f = static_cast<float>(v);
    std::memcpy(b.data() + j * 4, &f, 4);
  }

  std::vector<ParamSpec> specs_;
  std::vector<std::vector<uint8_t>> value_, grad_;
  std::vector<PL_Parameter> params_;
};

}  // namespace ddptest
