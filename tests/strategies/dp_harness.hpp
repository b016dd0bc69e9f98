// Shared by the dp/ddp2 tests: a dp-family strategy instance driven through its plugin's C table
// (with the ABI 1.3 entries num_replicas and setup_replica), and models of one root plus replicas.
// The model and its exact values come from ddp_harness.hpp.
#pragma once

#include "ddp_harness.hpp"

#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dptest {

using ddptest::Model;
using ddptest::ParamSpec;

struct Config {
  int rank = 0, world = 1;
  pl::Accelerator accelerator;  // empty: no accelerator in the config
  std::vector<int32_t> device_ids{0};
  std::string backend = "gloo";
  PL_Store* store = nullptr;
  int64_t timeout_ms = 0;
  std::vector<std::pair<std::string, std::string>> options;
};

// fn(replica, num_replicas, device, params, num_params); may throw (the error names what it threw).
using ReplicaFn = std::function<void(int, int, PL_Device, PL_Parameter*, size_t)>;

// One strategy instance, created through PL_StrategyApi; every call throws pl::Error.
class Strategy {
 public:
  Strategy(const pl::Runtime& rt, const std::string& name, const Config& c) : host_(rt.host()) {
    ref_ = rt.find(PL_PLUGIN_STRATEGY, name);
    api_ = ref_.api<PL_StrategyApi>();
    std::vector<PL_Option> items;
    for (const auto& kv : c.options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    PL_StrategyConfig sc{};
    sc.struct_size = sizeof sc;
    sc.global_rank = c.rank;
    sc.world_size = c.world;
    sc.local_rank = 0;  // one process per node
    sc.local_world_size = 1;
    sc.node_rank = c.rank;
    sc.num_nodes = c.world;
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

  int num_replicas() {
    int32_t n = -1;
    pl::check(host_, api_->num_replicas(s_, &n));
    return n;
  }
  void setup(std::vector<PL_Parameter>& p) { pl::check(host_, api_->setup(s_, p.data(), p.size())); }
  void setup_replica(int r, std::vector<PL_Parameter>& p) {
    pl::check(host_, api_->setup_replica(s_, r, p.data(), p.size()));
  }
  void run_step(ReplicaFn fn) {
    struct Call {
      ReplicaFn fn;
      const PL_Host* host;
    } call{std::move(fn), host_};
    PL_ReplicaStepFn f{};
    f.struct_size = sizeof f;
    f.user = &call;
    f.run = [](void* user, int32_t r, int32_t n, PL_Device d, PL_Parameter* p, size_t np) -> PL_Error* {
      auto* c = static_cast<Call*>(user);
      try {
        c->fn(r, n, d, p, np);
        return nullptr;
      } catch (const std::exception& e) {
        return c->host->error_new(PL_ERR_RUNTIME, (std::string("the test's step function threw: ") + e.what()).c_str());
      } catch (...) {
        return c->host->error_new(PL_ERR_RUNTIME, "the test's step function threw");
      }
    };
    pl::check(host_, api_->run_step(s_, &f));
  }
  void after_backward() { pl::check(host_, api_->after_backward(s_)); }
  void after_optimizer_step() { pl::check(host_, api_->after_optimizer_step(s_)); }
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

// The root (models[0]) and n-1 replicas of one module, each with its own host memory.
struct Replicas {
  explicit Replicas(int n, std::vector<ParamSpec> specs = ddptest::standard_specs()) {
    for (int r = 0; r < n; ++r) models.push_back(std::make_unique<Model>(specs));
  }
  Model& operator[](size_t r) { return *models[r]; }
  size_t size() const { return models.size(); }
  // setup(root), then setup_replica(r) for every replica.
  void register_with(Strategy& s) {
    s.setup(models[0]->params());
    for (size_t r = 1; r < models.size(); ++r) s.setup_replica(static_cast<int>(r), models[r]->params());
  }
  std::vector<std::unique_ptr<Model>> models;
};

// Replica r's gradient of entry p, element j at `step` on rank `rank`: distinct per replica and
// exact in float32, as are the sums and means the tests expect.
inline double replica_grad(size_t p, int64_t j, int rank, int replica, int step) {
  return ddptest::grad_value(p, j, rank, step) * (replica + 1);
}

// What a replica's fn writes: every requires_grad entry in full.
inline void write_grads(Model& m, int rank, int replica, int step) {
  for (size_t i = 0; i < m.size(); ++i)
    if (m.spec(i).requires_grad)
      for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_grad(i, j, replica_grad(i, j, rank, replica, step));
}

// The error that `fn` throws (fails the test when there is none).
template <class Fn>
pl::Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const pl::Error& e) {
    return e;
  }
  ADD_FAILURE() << "the call succeeded";
  return pl::Error(PL_ERR_OK, "");
}

}  // namespace dptest
