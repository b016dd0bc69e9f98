// Shared by the dp/ddp2 tests: a dp-family strategy instance driven through its plugin's C table
// (strategy_harness.hpp, with dp's run_step; the ABI 1.3 entries num_replicas and setup_replica are
// there), and models of one root plus replicas.  The model and its exact values come from
// ddp_harness.hpp.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp_harness.hpp"
#include "expect_error.hpp"
#include "strategy_harness.hpp"

namespace dptest {

using ddptest::Model;
using ddptest::ParamSpec;
using Config = strattest::Config;  // local_rank unused: one process per node
using strattest::error_of;

// fn(replica, num_replicas, device, params, num_params); may throw (the error names what it threw).
using ReplicaFn = std::function<void(int, int, PL_Device, PL_Parameter*, size_t)>;

// A dp-family instance (one process per node); every call throws pl::Error.
class Strategy : public strattest::Strategy {
 public:
  Strategy(const pl::Runtime& rt, const std::string& name, const Config& c)
      : strattest::Strategy(rt, name, c, strattest::Layout::kProcessPerNode) {}

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

}  // namespace dptest
