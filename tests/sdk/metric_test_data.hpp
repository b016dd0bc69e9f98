// Shared by the metrics' tests (test_torchmetrics*.cpp): deterministic data sets, their split into
// uneven per-rank shards and batches, ranks as threads over gloo, and the references written
// independently of sdk/src/metric_*.cpp (per-class precision and recall; pairwise AUROC).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/store.hpp>
#include <plrt/sdk/torchmetrics.hpp>
#include <random>
#include <thread>
#include <vector>

namespace metric_test {

// N samples of C classes: scores (row-major [N, C], softmax probabilities), targets, and float
// regression pairs.  Targets skew toward the top score so the metrics are far from trivial.
struct Data {
  int64_t n = 0, c = 0;
  std::vector<double> probs;
  std::vector<int64_t> target;
  std::vector<double> reg_pred, reg_target, weight;
};

inline Data make_data(int64_t n, int64_t c, unsigned seed, bool coarse_scores = false) {
  Data d;
  d.n = n;
  d.c = c;
  std::mt19937_64 g(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int64_t> cls(0, c - 1);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> z(static_cast<size_t>(c));
    const int64_t t = cls(g);
    for (int64_t j = 0; j < c; ++j) z[static_cast<size_t>(j)] = normal(g) + (j == t ? 1.0 : 0.0);
    // coarse scores: few distinct values, so many ties
    if (coarse_scores)
      for (auto& v : z) v = std::round(v * 2) / 2;
    double m = *std::max_element(z.begin(), z.end()), s = 0;
    for (auto& v : z) s += (v = std::exp(v - m));
    for (auto& v : z) d.probs.push_back(v / s);
    d.target.push_back(t);
    d.reg_target.push_back(normal(g));
    d.reg_pred.push_back(d.reg_target.back() + 0.3 * normal(g));
    d.weight.push_back(std::uniform_real_distribution<double>(0.0, 2.0)(g));
  }
  return d;
}

// Rows [begin, end) of the data as tensors.
inline pl::Tensor probs_rows(const Data& d, int64_t b, int64_t e) {
  return pl::Tensor::from_vector(std::vector<double>(d.probs.begin() + b * d.c, d.probs.begin() + e * d.c),
                                 {e - b, d.c});
}
inline pl::Tensor target_rows(const Data& d, int64_t b, int64_t e) {
  return pl::Tensor::from_vector(std::vector<int64_t>(d.target.begin() + b, d.target.begin() + e), {e - b});
}
inline pl::Tensor rows(const std::vector<double>& v, int64_t b, int64_t e) {
  return pl::Tensor::from_vector(std::vector<double>(v.begin() + b, v.begin() + e), {e - b});
}

// Uneven shards: rank r of `world` gets rows [bounds[r], bounds[r+1]); the last rank may get none.
inline std::vector<int64_t> shard_bounds(int64_t n, int world) {
  std::vector<int64_t> b{0};
  for (int r = 0; r < world; ++r) {
    const int64_t take = r + 1 == world ? n - b.back() : std::min(n - b.back(), (n * (r + 2)) / (world * world + 1));
    b.push_back(b.back() + take);
  }
  return b;
}

// Feeds rows [b, e) in batches of `batch` (the last one shorter) to fn(b, e).
inline void batches(int64_t b, int64_t e, int64_t batch, const std::function<void(int64_t, int64_t)>& fn) {
  for (int64_t i = b; i < e; i += batch) fn(i, std::min(e, i + batch));
}

// ---- references on the union ----
inline std::vector<int64_t> argmax_rows(const Data& d) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < d.n; ++i) {
    auto row = d.probs.begin() + i * d.c;
    out.push_back(std::max_element(row, row + d.c) - row);
  }
  return out;
}

inline double ref_accuracy(const Data& d) {
  auto p = argmax_rows(d);
  int64_t ok = 0;
  for (int64_t i = 0; i < d.n; ++i) ok += p[static_cast<size_t>(i)] == d.target[static_cast<size_t>(i)];
  return static_cast<double>(ok) / static_cast<double>(d.n);
}

// F1 as 2PR/(P+R) per class; macro over the classes in targets or predictions.
inline double ref_f1(const Data& d, bool macro) {
  auto p = argmax_rows(d);
  if (!macro) return ref_accuracy(d);  // single-label multiclass: micro F1 == accuracy
  double sum = 0;
  int present = 0;
  for (int64_t c = 0; c < d.c; ++c) {
    double tp = 0, pred = 0, actual = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      tp += p[i] == c && d.target[i] == c;
      pred += p[i] == c;
      actual += d.target[i] == c;
    }
    if (pred == 0 && actual == 0) continue;
    const double prec = pred ? tp / pred : 0, rec = actual ? tp / actual : 0;
    sum += prec + rec > 0 ? 2 * prec * rec / (prec + rec) : 0;
    ++present;
  }
  return sum / present;
}

// The probability that a random positive outscores a random negative (ties count half).
inline double ref_auroc_column(const Data& d, int64_t col, const std::function<bool(size_t)>& positive) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < static_cast<size_t>(d.n); ++i) {
    if (!positive(i)) continue;
    for (size_t j = 0; j < static_cast<size_t>(d.n); ++j) {
      if (positive(j)) continue;
      const double a = d.probs[i * static_cast<size_t>(d.c) + static_cast<size_t>(col)];
      const double b = d.probs[j * static_cast<size_t>(d.c) + static_cast<size_t>(col)];
      wins += a > b ? 1.0 : a == b ? 0.5 : 0.0;
      pairs += 1;
    }
  }
  return wins / pairs;
}

inline double ref_auroc_ovr(const Data& d) {
  double s = 0;
  for (int64_t c = 0; c < d.c; ++c) s += ref_auroc_column(d, c, [&](size_t i) { return d.target[i] == c; });
  return s / static_cast<double>(d.c);
}

inline double ref_mse(const Data& d) {
  double s = 0;
  for (size_t i = 0; i < d.reg_pred.size(); ++i) s += std::pow(d.reg_pred[i] - d.reg_target[i], 2);
  return s / static_cast<double>(d.reg_pred.size());
}

inline double ref_weighted_mean(const Data& d) {
  double s = 0, w = 0;
  for (size_t i = 0; i < d.reg_pred.size(); ++i) s += d.reg_pred[i] * d.weight[i], w += d.weight[i];
  return s / w;
}

// ---- ranks as threads, each with its own runtime, store client and gloo group ----
inline pl::RuntimeOptions runtime_options() {
  pl::RuntimeOptions o;
  o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  o.use_env_dirs = false;
  o.use_default_dirs = false;
  o.log_level = "off";
  return o;
}

inline void run_ranks(int world, const std::function<void(int rank, const pl::ProcessGroup&)>& body) {
  using namespace std::chrono_literals;
  pl::Runtime server_rt(runtime_options());
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.token = "metrics-test";
  so.timeout = 20s;
  pl::Store server(server_rt, so);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        pl::Runtime rt(runtime_options());
        pl::StoreOptions co = so;
        co.is_server = false;
        co.port = server.port();
        pl::Store store(rt, co);
        pl::ProcessGroupOptions po;
        po.rank = r;
        po.world_size = world;
        po.timeout = 20s;
        pl::ProcessGroup pg(rt, "gloo", store, po);
        body(r, pg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : threads) t.join();
}

}  // namespace metric_test
