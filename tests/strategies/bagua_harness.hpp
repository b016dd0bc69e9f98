// The bagua algorithms' tests (docs/bagua.md) share this: a tiny model trained through the bagua
// plugin's C table at W ranks (threads of one process, gloo on loopback), and the pieces of an
// independent reference that replays the same training for every rank in plain loops.
//
// The model: y = W x + b, W 3x5 and b 3 (float32, registered as "fc.weight", "fc.bias"); the loss
// 0.5/B * sum ||W x + b - t||^2 over rank r's batch of step k (kBatch samples, a function of r and
// k only).  Each rank starts from its own values (rank 0's win at setup).  The host's optimizer is
// plain SGD (x -= lr * g) on the ranges optimizer_step names.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <plrt/sdk/process_group.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ddp_harness.hpp"

namespace baguatest {

constexpr int kOut = 3, kIn = 5, kBatch = 4;
constexpr int kWeights = kOut * kIn, kParams = kWeights + kOut;  // 18 values: [W row-major | b]

using Weights = std::vector<float>;  // one rank's values, W then b

// Rank r's starting values (different per rank: setup must broadcast rank 0's).
inline Weights initial(int rank) {
  Weights x(kParams);
  for (int i = 0; i < kParams; ++i) x[i] = static_cast<float>(0.1 * std::sin(1.3 * i + 0.7) + 0.05 * rank);
  return x;
}

// The gradient of rank r's loss at step k, at values x (plain loops, float32 like the plugin's
// host would compute it).
inline Weights gradient(const Weights& x, int rank, int step) {
  Weights g(kParams, 0.0f);
  for (int s = 0; s < kBatch; ++s) {
    float in[kIn], out[kOut];
    for (int j = 0; j < kIn; ++j) in[j] = static_cast<float>(std::cos(0.37 * (rank * 131 + step * 17 + s * 5 + j)));
    for (int o = 0; o < kOut; ++o) {
      float y = x[kWeights + o], t = 0;
      for (int j = 0; j < kIn; ++j) {
        y += x[o * kIn + j] * in[j];
        t += static_cast<float>(0.3 * (o + 1) - 0.2 * j) * in[j];
      }
      out[o] = (y - t) / kBatch;
    }
    for (int o = 0; o < kOut; ++o) {
      for (int j = 0; j < kIn; ++j) g[o * kIn + j] += out[o] * in[j];
      g[kWeights + o] += out[o];
    }
  }
  return g;
}

// The accelerators' uint8 quantizer (pl_accelerator.h quantize_u8 / dequantize_u8), one chunk:
// encode then decode, in float32.  Written from the ABI's text, not from the kernels.
inline std::vector<float> q_plrt(const float* x, size_t n) {
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float scale = (hi - lo) / 255.0f;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    float q = 0;
    if (scale != 0) q = std::nearbyint(std::min(255.0f, std::max(0.0f, (x[i] - lo) / scale)));
    out[i] = lo + q * scale;
  }
  return out;
}

// Bagua's quantizer as the issue states it (docs/bagua.md): within one step of q_plrt.
inline std::vector<float> q_bagua(const float* x, size_t n) {
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  std::vector<float> out(n);
  if (hi == lo) {
    std::fill(out.begin(), out.end(), lo);
    return out;
  }
  const float scale = 255.0f / (hi - lo + 1e-7f);
  const float ub = std::nearbyint(hi * scale), lb = ub - 255.0f;
  for (size_t i = 0; i < n; ++i) {
    const float q = std::min(std::nearbyint(x[i] * scale), ub) - lb;  // 0..255
    out[i] = (q + lb) / scale;
  }
  return out;
}

// The quantization step of a chunk: (max - min) / 255.
inline float q_step(const float* x, size_t n) {
  const auto [lo, hi] = std::minmax_element(x, x + n);
  return (*hi - *lo) / 255.0f;
}

// The tiny model's two parameters ("fc.weight" [W], "fc.bias" [b]) over x and g (kParams each,
// borrowed: they must outlive the strategy's use).
inline std::vector<PL_Parameter> tiny_params(Weights& x, Weights& g) {
  std::vector<PL_Parameter> params(2);
  const char* names[2] = {"fc.weight", "fc.bias"};
  for (int p = 0; p < 2; ++p) {
    params[p].struct_size = sizeof(PL_Parameter);
    params[p].name = names[p];
    const int64_t off = p == 0 ? 0 : kWeights, n = p == 0 ? kWeights : kOut;
    params[p].value = pl::tensor_view(x.data() + off, PL_F32, n);
    params[p].grad = pl::tensor_view(g.data() + off, PL_F32, n);
    params[p].requires_grad = 1;
    params[p].kind = PL_PARAM_TRAINABLE;
  }
  return params;
}

// Rank `rank` of `world` on `nodes` nodes of world/nodes consecutive ranks (one by default), on the
// cpu accelerator (which the config owns: keep the config alive as long as the strategy), with the
// test's store and `options`.
inline ddptest::StrategyConfig rank_config(const pl::Runtime& rt, PL_Store* store, int rank, int world,
                                           const std::vector<std::pair<std::string, std::string>>& options = {},
                                           int nodes = 1) {
  ddptest::StrategyConfig c;
  c.rank = rank;
  c.world = world;
  c.num_nodes = nodes;
  c.local_rank = rank % (world / nodes);
  c.accelerator = pl::Accelerator(rt, "cpu");
  c.store = store;
  c.timeout_ms = 30000;
  c.options = options;
  return c;
}

// One rank's view while training: the host calls the hooks at the points Trainer does.
struct Run {
  int rank = 0, world = 1;
  ddptest::Strategy* strategy = nullptr;
  Weights* x = nullptr;
  const PL_Host* host = nullptr;
};

// A run that resumes: steps first_step.. only, after_setup(run) on every rank after setup (where
// the host loads a checkpoint: the strategy's load_state, then the model).
struct Resume {
  int first_step = 0;
  std::function<void(Run&)> after_setup;
};

// The host's side that an optimizer other than plain SGD changes (qadam's QAdam): called on each
// rank's thread.  `bind`: after setup (ABI 1.6 bind_optimizer goes here); `form`: after the
// gradient is computed, before it is reported; `step`: the optimizer on x from g.
struct HostOptimizer {
  std::function<void(const PL_StrategyApi*, PL_Strategy*, const PL_Host*)> bind;
  std::function<void(Weights& x, Weights& g)> form;
  std::function<void(Weights& x, const Weights& g)> step;
};

struct TrainResult {
  std::vector<Weights> weights;                      // per rank, after the last step
  std::vector<std::map<std::string, double>> stats;  // per rank, the names asked for
};

// Trains `steps` steps of the tiny model with strategy `name` (options after the alias's presets)
// at `world` ranks on `nodes` nodes (rank_config), SGD with `lr`; `after_step(run, k)`, when set,
// runs on every rank after step k (0-based).  Fails the test on any rank's error.
inline TrainResult train_on_nodes(const std::string& name, int world, int nodes,
                                  const std::vector<std::pair<std::string, std::string>>& options, int steps, float lr,
                                  const std::vector<std::string>& stat_names = {},
                                  const std::function<void(Run&, int)>& after_step = nullptr, const Resume& resume = {},
                                  const std::function<HostOptimizer(int rank)>& host_optimizer = nullptr) {
  TrainResult result;
  result.weights.resize(static_cast<size_t>(world));
  result.stats.resize(static_cast<size_t>(world));
  const auto failures = strattest::run_ranks(world, "bagua-" + name, [&](int rank, int port) {
    pl::Runtime rt(strattest::runtime_options());
    pl::Store store(rt, strattest::store_client(port, "bagua-" + name));
    const ddptest::StrategyConfig c = rank_config(rt, store.get(), rank, world, options, nodes);
    ddptest::Strategy s(rt, name, c);
    Weights x = initial(rank), g(kParams, 0.0f);
    std::vector<PL_Parameter> params = tiny_params(x, g);
    s.setup(params);
    const PL_StrategyApi* api = s.api();
    const HostOptimizer host = host_optimizer ? host_optimizer(rank) : HostOptimizer{};
    if (host.bind) host.bind(api, s.get(), rt.host());
    struct Sgd {
      Weights* x;
      Weights* g;
      float lr;
      const HostOptimizer* host;
    } sgd{&x, &g, lr, &host};
    PL_OptimizerFn fn{};
    fn.struct_size = sizeof fn;
    fn.user = &sgd;
    fn.step = [](void* user, const PL_ParamRange* r, size_t n) -> PL_Error* {
      auto* o = static_cast<Sgd*>(user);
      if (o->host->step) {  // every parameter whole (bagua's ranges)
        o->host->step(*o->x, *o->g);
        return nullptr;
      }
      for (size_t i = 0; i < n; ++i) {
        const int64_t off = r[i].param_index == 0 ? 0 : kWeights;
        for (int64_t j = r[i].begin; j < r[i].end; ++j) (*o->x)[off + j] -= o->lr * (*o->g)[off + j];
      }
      return nullptr;
    };
    Run run{rank, world, &s, &x, rt.host()};
    if (resume.after_setup) resume.after_setup(run);
    for (int k = resume.first_step; k < steps; ++k) {
      s.run_step([&](PL_Device, PL_Parameter*, size_t) {
        const Weights fresh = gradient(x, rank, k);
        std::copy(fresh.begin(), fresh.end(), g.begin());  // in place: the plugin holds g's memory
        if (host.form) host.form(x, g);
        s.on_grad_ready(1);
        s.on_grad_ready(0);
      });
      s.after_backward();
      if (api->before_optimizer_step) pl::check(rt.host(), api->before_optimizer_step(s.get()));
      pl::check(rt.host(), api->optimizer_step(s.get(), &fn));
      s.after_optimizer_step();
      if (after_step) after_step(run, k);
    }
    for (const auto& n : stat_names) result.stats[static_cast<size_t>(rank)][n] = s.stat(n);
    s.teardown();
    result.weights[static_cast<size_t>(rank)] = x;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
  return result;
}

// The same on one node.
inline TrainResult train(const std::string& name, int world,
                         const std::vector<std::pair<std::string, std::string>>& options, int steps, float lr,
                         const std::vector<std::string>& stat_names = {},
                         const std::function<void(Run&, int)>& after_step = nullptr, const Resume& resume = {},
                         const std::function<HostOptimizer(int rank)>& host_optimizer = nullptr) {
  return train_on_nodes(name, world, 1, options, steps, lr, stat_names, after_step, resume, host_optimizer);
}

// The strategy's checkpoint entries through its C table (every rank calls them, as the host does).
inline void save_state(const Run& run, const std::string& dir) {
  pl::check(run.host, run.strategy->api()->save_state(run.strategy->get(), dir.c_str()));
}
inline void load_state(const Run& run, const std::string& dir, int saved_world) {
  pl::check(run.host, run.strategy->api()->load_state(run.strategy->get(), dir.c_str(), saved_world));
}

// The largest |a[i] - b[i]|.
inline double max_abs_diff(const Weights& a, const Weights& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace baguatest
