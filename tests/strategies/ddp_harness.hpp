// Shared by the ddp tests (in-process) and ddp_worker (one rank of a multi-process job): a strategy
// instance driven through its plugin's C table, and a small model of named parameters with host
// storage and values chosen so that every mean the tests expect is exact in float32.
#pragma once

#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ddptest {

// A runtime that sees the build tree's plugins only.
inline pl::RuntimeOptions runtime_options(const std::string& log_level = "warn") {
  pl::RuntimeOptions o;
  o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  o.use_env_dirs = false;
  o.use_default_dirs = false;
  o.log_level = log_level;
  return o;
}

struct StrategyConfig {
  int rank = 0, world = 1, local_rank = 0;
  pl::Accelerator accelerator;  // empty: no accelerator in the config
  std::vector<int32_t> device_ids{0};
  std::string backend = "gloo";
  PL_Store* store = nullptr;
  int64_t timeout_ms = 0;
  std::vector<std::pair<std::string, std::string>> options;
};

// One strategy instance, created through PL_StrategyApi; every call throws pl::Error.
class Strategy {
 public:
  Strategy(const pl::Runtime& rt, const std::string& name, const StrategyConfig& c) : host_(rt.host()) {
    ref_ = rt.find(PL_PLUGIN_STRATEGY, name);
    api_ = ref_.api<PL_StrategyApi>();
    std::vector<PL_Option> items;
    for (const auto& kv : ref_.presets) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    for (const auto& kv : c.options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    PL_StrategyConfig sc{};
    sc.struct_size = sizeof sc;
    sc.global_rank = c.rank;
    sc.world_size = c.world;
    sc.local_rank = c.local_rank;
    sc.local_world_size = c.world;
    sc.num_nodes = 1;
    sc.accelerator_api = c.accelerator.defined() ? c.accelerator.api() : nullptr;
    sc.accelerator = c.accelerator.defined() ? c.accelerator.get() : nullptr;
    sc.device_ids = c.device_ids.data();
    sc.num_devices = c.device_ids.size();
    sc.process_group_backend = c.backend.c_str();
    sc.store = c.store;
    sc.timeout_ms = c.timeout_ms;
    sc.options = {sizeof(PL_OptionList), items.data(), items.size()};
    pl::check(host_, api_->create(host_, &sc, &s_));
  }
  ~Strategy() {
    if (s_) api_->destroy(s_);
  }
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const PL_StrategyApi* api() const { return api_; }
  PL_Strategy* get() const { return s_; }

  void setup(std::vector<PL_Parameter>& params) { pl::check(host_, api_->setup(s_, params.data(), params.size())); }
  // fn(device, params, num_params) is the replica's forward+backward.
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
  void on_grad_ready(size_t i) { pl::check(host_, api_->on_grad_ready(s_, i)); }
  void after_backward() { pl::check(host_, api_->after_backward(s_)); }
  void set_grad_sync(bool on) { pl::check(host_, api_->set_grad_sync(s_, on ? 1 : 0)); }
  void teardown() { pl::check(host_, api_->teardown(s_)); }
  double stat(const std::string& name) {
    double v = -1;
    pl::check(host_, api_->get_stat(s_, name.c_str(), &v));
    return v;
  }
  std::pair<const PL_ProcessGroupApi*, PL_ProcessGroup*> process_group() {
    const PL_ProcessGroupApi* a = nullptr;
    PL_ProcessGroup* g = nullptr;
    pl::check(host_, api_->process_group(s_, &a, &g));
    return {a, g};
  }

 private:
  const PL_Host* host_;
  pl::PluginRef ref_;
  const PL_StrategyApi* api_ = nullptr;
  PL_Strategy* s_ = nullptr;
};

struct ParamSpec {
  std::string name;
  PL_DType dtype;
  int64_t numel;
  bool requires_grad;
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
      p.value = view(value_[i].data(), specs_[i]);
      p.grad = view(grad_[i].data(), specs_[i]);
      p.requires_grad = specs_[i].requires_grad ? 1 : 0;
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
  static PL_Tensor view(void* data, const ParamSpec& s) {
    PL_Tensor t{};
    t.struct_size = sizeof t;
    t.data = data;
    t.dtype = s.dtype;
    t.device = {PL_DEVICE_CPU, 0};
    t.numel = s.numel;
    t.ndim = 1;
    t.shape[0] = s.numel;
    return t;
  }
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
