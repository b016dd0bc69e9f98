// low_precision_decentralized (docs/bagua.md §4) against a reference that replays every rank in
// plain loops: SGD on each rank's own gradient, then every communication_interval steps, per bucket
// ([fc.bias | fc.weight], or one bucket each), t = x + l/3 + r/3 - 5w/3 in the plugin's order of
// f32 operations, d = Q(t), l += d_left, r += d_right, w += d, x = w.  With the accelerators'
// quantizer (q_plrt, from the ABI's text) every rank's weights agree bit for bit; with Bagua's
// formula (q_bagua) within the steps each quantization can move them by.  The per-rank state files
// show that each rank's l is its left neighbour's w exactly, and r its right neighbour's.
// Hierarchical (nodes of two ranks): t is the node's mean of x (summed in rank order, then divided,
// as the process group's AVG), the ring is the nodes' leaders, and every rank of a node takes its
// leader's w.
#include <algorithm>
#include <functional>

#include "bagua_harness.hpp"
#include "bagua_state_file.hpp"

namespace {

using namespace baguatest;

constexpr int kSteps = 16;
constexpr float kLr = 0.1f;
const char* const kName = "bagua_low_precision_decentralized";
using Quantizer = std::function<std::vector<float>(const float*, size_t)>;
using Options = std::vector<std::pair<std::string, std::string>>;

// The buckets, as (offset, count) ranges of Weights: reverse registration order, so fc.bias first.
using Bucket = std::vector<std::pair<int, int>>;
std::vector<Bucket> buckets(bool split) {
  const std::pair<int, int> bias{kWeights, kOut}, weight{0, kWeights};
  if (split) return {{bias}, {weight}};
  return {{bias, weight}};
}

std::vector<float> pack(const Weights& x, const Bucket& b) {
  std::vector<float> out;
  for (const auto& [off, n] : b) out.insert(out.end(), x.begin() + off, x.begin() + off + n);
  return out;
}
void unpack(const std::vector<float>& flat, const Bucket& b, Weights& x) {
  size_t k = 0;
  for (const auto& [off, n] : b)
    for (int i = 0; i < n; ++i) x[off + i] = flat[k++];
}

struct RankRef {
  Weights x;
  std::vector<std::vector<float>> w, l, r;  // per bucket
};

// Every rank's state after kSteps; *tol: the steps the quantizations could move the weights by.
// per_node > 1: hierarchical, the ring's members are the nodes (their replicas kept in the leader's
// RankRef: rank node * per_node).
std::vector<RankRef> reference(int world, const Quantizer& q, bool split, int interval, double* tol, int per_node = 1) {
  const auto layout = buckets(split);
  std::vector<RankRef> ranks(static_cast<size_t>(world));
  for (auto& rk : ranks) {
    rk.x = initial(0);  // rank 0's values, broadcast at setup
    for (const auto& b : layout) {
      rk.w.push_back(pack(rk.x, b));
      rk.l.push_back(rk.w.back());
      rk.r.push_back(rk.w.back());
    }
  }
  *tol = 0;
  const float third = static_cast<float>(1.0 / 3.0), minus_five_thirds = static_cast<float>(-5.0 / 3.0);
  for (int k = 0; k < kSteps; ++k) {
    for (int r = 0; r < world; ++r) {
      const Weights g = gradient(ranks[r].x, r, k);
      for (int i = 0; i < kParams; ++i) ranks[r].x[i] -= kLr * g[i];
    }
    if (k % interval != 0) continue;
    double worst = 0;
    const int n = world / per_node;  // the ring's members
    for (size_t b = 0; b < layout.size(); ++b) {
      std::vector<std::vector<float>> d(static_cast<size_t>(n));
      for (int m = 0; m < n; ++m) {
        RankRef& rk = ranks[m * per_node];
        std::vector<float> t = pack(rk.x, layout[b]);
        if (per_node > 1) {  // the node's mean
          for (int j = 1; j < per_node; ++j) {
            const std::vector<float> o = pack(ranks[m * per_node + j].x, layout[b]);
            for (size_t i = 0; i < t.size(); ++i) t[i] += o[i];
          }
          for (float& v : t) v /= static_cast<float>(per_node);
        }
        for (size_t i = 0; i < t.size(); ++i) {
          t[i] = t[i] + third * rk.l[b][i];
          t[i] = t[i] + third * rk.r[b][i];
          t[i] = t[i] + minus_five_thirds * rk.w[b][i];
        }
        d[m] = q(t.data(), t.size());
        worst = std::max(worst, static_cast<double>(q_step(t.data(), t.size())));
      }
      for (int m = 0; m < n; ++m) {
        RankRef& rk = ranks[m * per_node];
        const auto& dl = d[(m + n - 1) % n];
        const auto& dr = d[(m + 1) % n];
        for (size_t i = 0; i < d[m].size(); ++i) {
          rk.l[b][i] = rk.l[b][i] + dl[i];
          rk.r[b][i] = rk.r[b][i] + dr[i];
          rk.w[b][i] = rk.w[b][i] + d[m][i];
        }
        for (int j = 0; j < per_node; ++j) unpack(rk.w[b], layout[b], ranks[m * per_node + j].x);
      }
    }
    *tol += worst;  // per exchange: half a step each for Bagua's rounding and plrt's
  }
  return ranks;
}

std::vector<float> identity(const float* x, size_t n) { return {x, x + n}; }

// The w, l or r of a state file as Weights (every parameter's entry: "w/0/fc.weight", "w/1/fc.bias").
Weights replica(const StateFile& f, const std::string& which) {
  Weights v = f.f32(which + "/0/fc.weight");
  const std::vector<float> b = f.f32(which + "/1/fc.bias");
  v.insert(v.end(), b.begin(), b.end());
  return v;
}
Weights ref_replica(const std::vector<std::vector<float>>& copy, bool split) {
  Weights v(kParams);
  const auto layout = buckets(split);
  for (size_t b = 0; b < layout.size(); ++b) unpack(copy[b], layout[b], v);
  return v;
}

// `nodes` > 1: on that many nodes, hierarchical (the default there): the ring is the leaders.
void expect_matches_reference(int world, bool split, int interval, int nodes = 1) {
  Options opts;
  if (split) opts.emplace_back("bucket_size_mb", "0.00001");  // 10 bytes: one bucket per parameter
  if (interval != 1) opts.emplace_back("communication_interval", std::to_string(interval));
  TempDir dir;
  const TrainResult got = train_on_nodes(kName, world, nodes, opts, kSteps, kLr,
                                         {"exchanges", "bytes_per_step", "buckets"}, [&](baguatest::Run& run, int k) {
                                           if (k == kSteps - 1) save_state(run, dir.str());
                                         });
  const std::string what = "W=" + std::to_string(world) + " nodes=" + std::to_string(nodes) +
                           " split=" + std::to_string(split) + " interval=" + std::to_string(interval);
  const int per_node = nodes > 1 ? world / nodes : 1, n = world / per_node;
  double tol = 0;
  const std::vector<RankRef> want = reference(world, q_plrt, split, interval, &tol, per_node);
  for (int r = 0; r < world; ++r) EXPECT_EQ(got.weights[r], want[r].x) << what << " rank " << r;
  const std::vector<RankRef> bagua = reference(world, q_bagua, split, interval, &tol, per_node);
  for (int r = 0; r < world; ++r)
    EXPECT_LE(max_abs_diff(got.weights[r], bagua[r].x), tol + 1e-6) << what << " rank " << r << " against q_bagua";
  // The replicas (the ring's members only: hierarchical, the leaders): l is the left neighbour's w
  // and r the right one's, bit for bit; each the reference's.
  std::vector<StateFile> files;
  for (int r = 0; r < world; ++r) files.push_back(read_state_file(dir.file(r)));
  for (int m = 0; m < n; ++m) {
    const int r = m * per_node, left = (m + n - 1) % n * per_node, right = (m + 1) % n * per_node;
    const Weights w = replica(files[r], "w");
    EXPECT_EQ(replica(files[r], "l"), replica(files[left], "w")) << what << " rank " << r;
    EXPECT_EQ(replica(files[r], "r"), replica(files[right], "w")) << what << " rank " << r;
    EXPECT_EQ(w, ref_replica(want[r].w, split)) << what << " rank " << r;
    EXPECT_EQ(replica(files[r], "l"), ref_replica(want[r].l, split)) << what << " rank " << r;
    if ((kSteps - 1) % interval == 0) {
      EXPECT_EQ(w, got.weights[r]) << "x = w after an exchange; " << what;
    }
  }
  const auto& st = got.stats[0];
  EXPECT_EQ(st.at("exchanges"), (kSteps + interval - 1) / interval);
  // Two encoded buckets a step: {min, max} and a byte per value, padded to 4.
  auto encoded = [](int numel) { return 2 * (8 + (numel + 3) / 4 * 4); };
  EXPECT_EQ(st.at("bytes_per_step"), split ? encoded(kOut) + encoded(kWeights) : encoded(kParams)) << what;
  // The compression shows: the same algorithm without Q ends elsewhere.
  double unused = 0;
  const std::vector<RankRef> exact = reference(world, identity, split, interval, &unused, per_node);
  EXPECT_GT(max_abs_diff(got.weights[0], exact[0].x), 1e-7) << what;
}

TEST(LowPrecisionDecentralized, MatchesReferenceAtTwoAndFourRanks) {
  for (int world : {2, 4}) expect_matches_reference(world, false, 1);
}

TEST(LowPrecisionDecentralized, OneBucketPerParameter) {
  for (int world : {2, 4}) expect_matches_reference(world, true, 1);
}

TEST(LowPrecisionDecentralized, CommunicationIntervalThree) { expect_matches_reference(4, false, 3); }

// Hierarchical: two nodes of two ranks (a ring of two leaders), and three nodes (a ring of three).
TEST(LowPrecisionDecentralized, HierarchicalRingOfTheNodesLeaders) {
  expect_matches_reference(4, false, 1, 2);
  expect_matches_reference(6, true, 1, 3);
  expect_matches_reference(6, false, 2, 3);
}

TEST(LowPrecisionDecentralized, RanksKeepTheirOwnWeights) {
  const TrainResult got = train(kName, 4, {}, kSteps, kLr);
  EXPECT_GT(max_abs_diff(got.weights[0], got.weights[2]), 1e-5);
}

// Float32 replicas only: a float64 parameter is an error at setup naming it.
TEST(LowPrecisionDecentralized, NeedsFloat32Parameters) {
  pl::Runtime rt(strattest::runtime_options());
  ddptest::StrategyConfig c;
  c.accelerator = pl::Accelerator(rt, "cpu");
  ddptest::Strategy s(rt, kName, c);
  std::vector<float> a(4), ga(4);
  std::vector<double> b(3), gb(3);
  std::vector<PL_Parameter> params(2);
  const char* names[2] = {"fc.weight", "head.weight"};
  for (int p = 0; p < 2; ++p) {
    params[p].struct_size = sizeof(PL_Parameter);
    params[p].name = names[p];
    params[p].value = p == 0 ? pl::tensor_view(a.data(), PL_F32, 4) : pl::tensor_view(b.data(), PL_F64, 3);
    params[p].grad = p == 0 ? pl::tensor_view(ga.data(), PL_F32, 4) : pl::tensor_view(gb.data(), PL_F64, 3);
    params[p].requires_grad = 1;
    params[p].kind = PL_PARAM_TRAINABLE;
  }
  try {
    s.setup(params);
    FAIL() << "setup accepted a float64 parameter";
  } catch (const pl::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), PL_ERR_UNSUPPORTED);
    EXPECT_NE(m.find("'head.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("float64"), std::string::npos) << m;
    EXPECT_NE(m.find("algorithm=decentralized"), std::string::npos) << m;
  }
}

}  // namespace
