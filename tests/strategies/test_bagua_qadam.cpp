// qadam (docs/bagua.md §6) through the bagua plugin's C table, the host's QAdam played by the test
// as plrt's Trainer plays pl::QAdam (bind_optimizer, m_i formed in the gradient before it is
// reported, the step taking the average as m with v frozen), against a reference that replays it
// for every rank in plain loops: the gradients' f32 mean through the warmup, then bytegrad's
// compression (the accelerators' Q) of the m_i.  Also: the optimizer checks of bind_optimizer.
#include <cmath>

#include "bagua_harness.hpp"

namespace {

using namespace baguatest;

constexpr int kSteps = 20, kWarmup = 5;
constexpr float kLr = 0.01f, kB1 = 0.9f, kB2 = 0.999f, kEps = 1e-8f;

// QAdam's state on one rank (or in the reference), and its rules.
struct QAdamState {
  Weights m = Weights(kParams, 0.0f), v = Weights(kParams, 0.0f);
  int64_t steps = 0;
  // m_i = beta1*m + (1-beta1)*g, in the SDK's order: (1-beta1)*g, then + beta1*m (wd = 0).
  void form(Weights& g) const {
    if (steps < kWarmup) return;
    for (int i = 0; i < kParams; ++i) g[i] = (1 - kB1) * g[i] + kB1 * m[i];
  }
  // The update with gradient g (warmup: Adam) or first moment g (after it: v frozen).
  void step(Weights& x, const Weights& g) {
    ++steps;
    const double bc1 = 1 - std::pow(0.9, steps), bc2 = std::sqrt(1 - std::pow(0.999, steps));
    for (int i = 0; i < kParams; ++i) {
      if (steps <= kWarmup) {
        m[i] = kB1 * m[i] + (1 - kB1) * g[i];
        v[i] = kB2 * v[i] + (1 - kB2) * g[i] * g[i];
      } else {
        m[i] = g[i];
      }
      x[i] -= static_cast<float>(kLr / bc1) * (m[i] / (std::sqrt(v[i]) / static_cast<float>(bc2) + kEps));
    }
  }
};

HostOptimizer qadam_host(QAdamState* st, const char* name, const char* warmup) {
  HostOptimizer h;
  h.bind = [name, warmup](const PL_StrategyApi* api, PL_Strategy* s, const PL_Host* host) {
    const PL_Option hyper[] = {{sizeof(PL_Option), "lr", "0.01"}, {sizeof(PL_Option), "warmup_steps", warmup}};
    PL_OptimizerInfo info{};
    info.struct_size = sizeof info;
    info.name = name;
    info.hyperparameters = {sizeof(PL_OptionList), hyper, 2};
    pl::check(host, api->bind_optimizer(s, &info));
    if (info.first_moment_in_grads != 1) throw std::runtime_error("qadam did not ask for the first moment");
  };
  h.form = [st](Weights&, Weights& g) { st->form(g); };
  h.step = [st](Weights& x, const Weights& g) { st->step(x, g); };
  return h;
}

// bytegrad of one bucket over the ranks' values, with the accelerators' Q (as the plugin does).
std::vector<float> compressed_mean(const std::vector<Weights>& vals) {
  const size_t n = vals.size(), numel = vals[0].size(), chunk = (numel + n - 1) / n;
  std::vector<float> out(chunk * n);
  for (size_t j = 0; j < n; ++j) {
    std::vector<float> sum(chunk);
    for (size_t r = 0; r < n; ++r) {
      std::vector<float> c(chunk, 0.0f);
      for (size_t i = 0; i < chunk && j * chunk + i < numel; ++i) c[i] = vals[r][j * chunk + i];
      const auto d = q_plrt(c.data(), chunk);
      for (size_t i = 0; i < chunk; ++i) sum[i] = r == 0 ? d[i] : sum[i] + d[i];
    }
    for (float& s : sum) s = static_cast<float>(s * (1.0 / static_cast<double>(n)));
    const auto d = q_plrt(sum.data(), chunk);
    std::copy(d.begin(), d.end(), out.begin() + static_cast<int64_t>(j * chunk));
  }
  out.resize(numel);
  return out;
}

// The bucket's order is [fc.bias | fc.weight] (reverse registration); weights are [W | b].
Weights to_bucket(const Weights& w) {
  Weights b(w.begin() + kWeights, w.end());
  b.insert(b.end(), w.begin(), w.begin() + kWeights);
  return b;
}
Weights from_bucket(const Weights& b) {
  Weights w(b.begin() + kOut, b.end());
  w.insert(w.end(), b.begin(), b.begin() + kOut);
  return w;
}

// per_node > 1: hierarchical, each node's m_i (or gradients) averaged first (summed in rank order,
// then divided), and the algorithm among the nodes' means.
Weights reference(int world, int per_node = 1) {
  Weights x = initial(0);
  QAdamState st;
  const int n = world / per_node;
  for (int k = 0; k < kSteps; ++k) {
    std::vector<Weights> sent(static_cast<size_t>(n));
    for (int r = 0; r < world; ++r) {
      Weights g = gradient(x, r, k);
      st.form(g);
      Weights& node = sent[static_cast<size_t>(r / per_node)];
      const Weights b = to_bucket(g);
      if (r % per_node == 0)
        node = b;
      else
        for (int i = 0; i < kParams; ++i) node[i] += b[i];
    }
    if (per_node > 1)
      for (Weights& node : sent)
        for (float& v : node) v /= static_cast<float>(per_node);
    Weights avg(kParams, 0.0f);
    if (st.steps < kWarmup) {
      for (int i = 0; i < kParams; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += sent[static_cast<size_t>(r)][i];
        avg[i] = sum / static_cast<float>(n);
      }
    } else {
      avg = compressed_mean(sent);
    }
    st.step(x, from_bucket(avg));
  }
  return x;
}

TEST(QAdam, MatchesReferenceAtTwoAndFourRanks) {
  for (int world : {2, 4}) {
    std::vector<QAdamState> states(static_cast<size_t>(world));
    const TrainResult got = train("bagua_qadam", world, {}, kSteps, kLr, {"bytes_per_step", "bucket_bytes"}, nullptr,
                                  {}, [&](int r) { return qadam_host(&states[static_cast<size_t>(r)], "QAdam", "5"); });
    for (int r = 1; r < world; ++r) EXPECT_EQ(got.weights[r], got.weights[0]) << "rank " << r;
    const Weights want = reference(world);
    EXPECT_LE(max_abs_diff(got.weights[0], want), 1e-5) << "W=" << world;
    EXPECT_GT(max_abs_diff(got.weights[0], initial(0)), 1e-2);
    // After the warmup the first moment travels compressed: n chunks of {min, max} and bytes.
    const int chunk = (kParams + world - 1) / world;
    EXPECT_EQ(got.stats[0].at("bytes_per_step"), world * (8 + (chunk + 3) / 4 * 4));
    EXPECT_EQ(got.stats[0].at("bucket_bytes"), 4 * kParams);
  }
}

// Hierarchical, two nodes of two: the node's mean of m_i, then bytegrad's compression between the
// two leaders (bytes_per_step: two chunks, on the leader).
TEST(QAdam, HierarchicalCompressesAmongTheNodesLeaders) {
  std::vector<QAdamState> states(4);
  const TrainResult got =
      train_on_nodes("bagua_qadam", 4, 2, {}, kSteps, kLr, {"bytes_per_step", "hierarchical"}, nullptr, {},
                     [&](int r) { return qadam_host(&states[static_cast<size_t>(r)], "QAdam", "5"); });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(got.weights[r], got.weights[0]) << "rank " << r;
  EXPECT_LE(max_abs_diff(got.weights[0], reference(4, 2)), 1e-5);
  EXPECT_GT(max_abs_diff(got.weights[0], reference(4)), 1e-5) << "the same as flat: the hierarchy did nothing";
  const int chunk = (kParams + 1) / 2;
  EXPECT_EQ(got.stats[0].at("bytes_per_step"), 2 * (8 + (chunk + 3) / 4 * 4));
  EXPECT_EQ(got.stats[0].at("hierarchical"), 1);
}

// With the warmup longer than the run, qadam is Adam on the f32 mean: no compression at all.
TEST(QAdam, WarmupIsTheF32Mean) {
  std::vector<QAdamState> a(2), b(2);
  const TrainResult warm = train("bagua_qadam", 2, {}, kWarmup, kLr, {"bytes_per_step", "bucket_bytes"}, nullptr, {},
                                 [&](int r) { return qadam_host(&a[static_cast<size_t>(r)], "QAdam", "5"); });
  const TrainResult mean = train("bagua", 2, {}, kWarmup, kLr, {}, nullptr, {}, [&](int r) {
    HostOptimizer h = qadam_host(&b[static_cast<size_t>(r)], "QAdam", "5");
    h.bind = nullptr;  // gradient_allreduce asks nothing of the optimizer
    return h;
  });
  EXPECT_LE(max_abs_diff(warm.weights[0], mean.weights[0]), 1e-7);
  EXPECT_EQ(warm.stats[0].at("bytes_per_step"), warm.stats[0].at("bucket_bytes"));
}

// One rank of bagua_qadam at `world` ranks over the tiny model, set up (threads of run_ranks).
struct QAdamRank {
  QAdamRank(const pl::Runtime& rt, PL_Store* store, int rank, int world) : c(rank_config(rt, store, rank, world)) {
    s = std::make_unique<ddptest::Strategy>(rt, "bagua_qadam", c);
    params = tiny_params(x, g);
    s->setup(params);
  }
  ddptest::StrategyConfig c;  // its accelerator outlives the strategy
  Weights x = initial(0), g = Weights(kParams);
  std::vector<PL_Parameter> params;
  std::unique_ptr<ddptest::Strategy> s;
};

// bind_optimizer refuses another optimizer and a QAdam without warmup_steps, naming them; a host
// that never binds gets an error at the first step, not a silent Adam.
TEST(QAdam, OptimizerChecks) {
  for (const auto& [name, warmup, expect] :
       std::vector<std::tuple<const char*, const char*, const char*>>{{"Adam", "5", "needs the QAdam optimizer"},
                                                                      {"QAdam", "-3", "warmup_steps"},
                                                                      {"QAdam", "x", "warmup_steps"}}) {
    const auto failures = strattest::run_ranks(1, "qadam-bind", [&](int rank, int port) {
      pl::Runtime rt(strattest::runtime_options());
      pl::Store store(rt, strattest::store_client(port, "qadam-bind"));
      QAdamRank r(rt, store.get(), rank, 1);
      QAdamState st;
      qadam_host(&st, name, warmup).bind(r.s->api(), r.s->get(), rt.host());
    });
    EXPECT_NE(failures[0].find(expect), std::string::npos) << name << " " << warmup << ": " << failures[0];
    EXPECT_NE(failures[0].find(name == std::string("Adam") ? "'Adam'" : warmup), std::string::npos) << failures[0];
  }
  const auto unbound = strattest::run_ranks(2, "qadam-unbound", [&](int rank, int port) {
    pl::Runtime rt(strattest::runtime_options());
    pl::Store store(rt, strattest::store_client(port, "qadam-unbound"));
    QAdamRank r(rt, store.get(), rank, 2);
    r.s->run_step([](PL_Device, PL_Parameter*, size_t) {});
  });
  for (const auto& f : unbound) EXPECT_NE(f.find("bind_optimizer"), std::string::npos) << f;
}

}  // namespace
