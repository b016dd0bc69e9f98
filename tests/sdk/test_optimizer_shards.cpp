// Sharded optimizer state resharded on load (sdk/src/optimizer_shards.*): the pieces that W' ranks
// saved (or one whole-parameter file) reassembled for the ranges each of W ranks keeps, for
// W' = 1..4 into W = 1..3 and partitions like a sharded strategy's (the flat ZeRO partition, and
// per-bucket chunks), over "one huge parameter, many tiny ones, sizes not divisible by W, W larger
// than some parameters"; every element checked against the state it was cut from.  Gaps,
// overlaps, disagreeing step counters, a field present in part, bad names and shapes are errors
// naming the parameter, the elements and the files.  Then through files with real optimizers:
// Adam and SGD state saved by W' "ranks" each stepping its own ranges, loaded by W others, which
// step on and must equal an optimizer that stepped every parameter whole all along; and the file
// errors (missing, damaged, another rank's, another optimizer's).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/optim.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <set>
#include <string>
#include <vector>

#include "optimizer_shards.hpp"
#include "sdk_test_support.hpp"

using ::testing::HasSubstr;

namespace {

using plrt::sdk::OptimizerShards;
using plrt::sdk::OptimizerState;
using plrt::sdk::ShardParam;
using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;

// One huge parameter, many tiny ones: numels 407, 1, 2, 3, 5, 1, 13, 8.
std::vector<ShardParam> params() {
  return {{"big.weight", {37, 11}, PL_F32},
          {"a", {1}, PL_F32},
          {"b", {2}, PL_F32},
          {"c", {3}, PL_F32},
          {"d", {5, 1}, PL_F32},
          {"e", {1}, PL_F32},
          {"f", {13}, PL_F32},
          {"g", {2, 4}, PL_F32}};
}

int64_t numel(const ShardParam& p) {
  return std::accumulate(p.shape.begin(), p.shape.end(), int64_t{1}, std::multiplies<>());
}
std::vector<int64_t> numels(const std::vector<ShardParam>& ps) {
  std::vector<int64_t> n;
  for (const auto& p : ps) n.push_back(numel(p));
  return n;
}

// The flat (ZeRO) partition: every element in parameter order, cut into `world` chunks whose sizes
// differ by at most one; rank r's ranges are its chunk's parts of each parameter.
std::vector<pl::ParamRange> flat_partition(const std::vector<int64_t>& n, int world, int rank) {
  const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
  auto start = [&](int r) { return total / world * r + std::min<int64_t>(r, total % world); };
  const int64_t lo = start(rank), hi = start(rank + 1);
  std::vector<pl::ParamRange> out;
  int64_t at = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const int64_t b = std::max(lo, at), e = std::min(hi, at + n[i]);
    if (b < e) out.push_back({i, b - at, e - at});
    at += n[i];
  }
  return out;
}

// Per-bucket chunks: parameters in reverse order filled into buckets of up to `cap` elements (a
// bigger parameter alone), each bucket's elements cut into `world` chunks; rank r owns chunk r of
// every bucket.
std::vector<pl::ParamRange> bucket_partition(const std::vector<int64_t>& n, int world, int rank, int64_t cap = 16) {
  std::vector<std::vector<size_t>> buckets{{}};
  int64_t fill = 0;
  for (size_t k = n.size(); k-- > 0;) {
    if (fill > 0 && fill + n[k] > cap) buckets.push_back({}), fill = 0;
    buckets.back().push_back(k);
    fill += n[k];
  }
  std::vector<pl::ParamRange> out;
  for (const auto& bucket : buckets) {
    std::vector<int64_t> sizes;
    for (size_t i : bucket) sizes.push_back(n[i]);
    for (const pl::ParamRange& r : flat_partition(sizes, world, rank)) out.push_back({bucket[r.param], r.begin, r.end});
  }
  return out;
}

using Layout = std::function<std::vector<pl::ParamRange>(const std::vector<int64_t>&, int, int)>;
std::vector<std::pair<std::string, Layout>> layouts() {
  return {{"flat", [](const auto& n, int w, int r) { return flat_partition(n, w, r); }},
          {"buckets", [](const auto& n, int w, int r) { return bucket_partition(n, w, r); }}};
}

// The full state the pieces are cut from: field f of parameter i, element k.
float full_value(const std::string& f, size_t i, int64_t k) {
  return static_cast<float>((f == "exp_avg" ? 1 : -1) * (1000.0 * static_cast<double>(i) + static_cast<double>(k)));
}

std::string key(size_t i, int64_t b, int64_t e, int64_t n, const std::string& f) {
  return "state." + std::to_string(i) + "." +
         (b == 0 && e == n ? "" : std::to_string(b) + "-" + std::to_string(e) + ".") + f;
}

// What a rank owning `ranges` saved: exp_avg, exp_avg_sq and the step counter of each range.
struct Piece {
  std::map<std::string, pl::Tensor> tensors;
  std::map<std::string, double> scalars;
};
Piece cut(const std::vector<ShardParam>& ps, const std::vector<pl::ParamRange>& ranges, double step = 7) {
  Piece p;
  for (const auto& r : ranges) {
    if (r.begin == r.end) continue;
    const int64_t n = numel(ps[r.param]);
    for (const std::string f : {"exp_avg", "exp_avg_sq"}) {
      std::vector<float> v;
      for (int64_t k = r.begin; k < r.end; ++k) v.push_back(full_value(f, r.param, k));
      const bool whole = r.begin == 0 && r.end == n;
      p.tensors[key(r.param, r.begin, r.end, n, f)] =
          pl::Tensor::from_vector(v, whole ? ps[r.param].shape : pl::Shape{r.end - r.begin});
    }
    p.scalars[key(r.param, r.begin, r.end, n, "step")] = step;
  }
  return p;
}

// Checks that `got` is exactly the state of `wanted`, cut from the full state.
void expect_state_of(const std::vector<ShardParam>& ps, const std::vector<pl::ParamRange>& wanted,
                     const OptimizerState& got, const std::string& what) {
  std::set<std::string> expected;
  for (const auto& r : wanted) {
    const int64_t n = numel(ps[r.param]);
    for (const std::string f : {"exp_avg", "exp_avg_sq"}) {
      const std::string k = key(r.param, r.begin, r.end, n, f);
      expected.insert(k);
      auto it = got.tensors.find(k);
      if (it == got.tensors.end()) {
        ADD_FAILURE() << what << ": no " << k;
        continue;
      }
      const bool whole = r.begin == 0 && r.end == n;
      EXPECT_EQ(it->second.shape(), whole ? ps[r.param].shape : pl::Shape{r.end - r.begin}) << what << " " << k;
      std::vector<float> want;
      for (int64_t e = r.begin; e < r.end; ++e) want.push_back(full_value(f, r.param, e));
      EXPECT_EQ(it->second.to_vector<float>(), want) << what << " " << k;
    }
    const std::string s = key(r.param, r.begin, r.end, n, "step");
    EXPECT_EQ(got.scalars.count(s), 1u) << what << ": no " << s;
    if (got.scalars.count(s)) {
      EXPECT_EQ(got.scalars.at(s), 7) << what << " " << s;
    }
  }
  for (const auto& [k, t] : got.tensors) EXPECT_TRUE(expected.count(k)) << what << ": state for " << k << " unwanted";
  EXPECT_EQ(got.scalars.size(), wanted.size() + 2) << what << ": one step per range, lr and step";
}

// Every saved world size and layout into every loading world size and layout.
TEST(OptimizerShards, EveryPartitionReshardsIntoEveryOther) {
  const auto ps = params();
  const auto n = numels(ps);
  std::vector<pl::ParamRange> whole;
  for (size_t i = 0; i < n.size(); ++i) whole.push_back({i, 0, n[i]});
  int cases = 0;
  for (const auto& [save_name, save_layout] : layouts())
    for (int saved = 1; saved <= 4; ++saved)
      for (const auto& [load_name, load_layout] : layouts())
        for (int world = 1; world <= 3; ++world) {
          std::vector<int64_t> covered(n.size(), 0);
          for (int rank = 0; rank < world; ++rank) {
            const std::string what = save_name + " W'=" + std::to_string(saved) + " -> " + load_name +
                                     " W=" + std::to_string(world) + " rank " + std::to_string(rank);
            const auto wanted = load_layout(n, world, rank);
            OptimizerShards shards("ckpt", ps, wanted);
            shards.set_global_scalars({{"lr", 0.5}, {"step", 3}});
            for (int r = 0; r < saved; ++r) {
              Piece p = cut(ps, save_layout(n, saved, r));
              shards.add("optimizer.rank" + std::to_string(r) + ".safetensors", p.tensors, p.scalars);
            }
            OptimizerState got = shards.finish();
            expect_state_of(ps, wanted, got, what);
            EXPECT_EQ(got.scalars.at("lr"), 0.5);
            for (const auto& r : wanted) covered[r.param] += r.end - r.begin;
            ++cases;
          }
          EXPECT_EQ(covered, n) << "the loading partition itself does not add up";
        }
  EXPECT_EQ(cases, 2 * 4 * 2 * (1 + 2 + 3));
  // a single whole-parameter file (ddp, single_device) into shards, and shards into whole ranges
  for (int world = 1; world <= 3; ++world)
    for (int rank = 0; rank < world; ++rank) {
      const auto wanted = flat_partition(n, world, rank);
      OptimizerShards shards("ckpt", ps, wanted);
      shards.set_global_scalars({{"lr", 0.5}, {"step", 3}});
      Piece p = cut(ps, whole);
      shards.add("optimizer.safetensors", p.tensors, p.scalars);
      expect_state_of(ps, wanted, shards.finish(), "single -> W=" + std::to_string(world));
    }
  OptimizerShards back("ckpt", ps, whole);
  for (int r = 0; r < 3; ++r) {
    Piece p = cut(ps, bucket_partition(n, 3, r));
    back.add("optimizer.rank" + std::to_string(r) + ".safetensors", p.tensors, p.scalars);
  }
  OptimizerState got = back.finish();
  ASSERT_EQ(got.tensors.count("state.0.exp_avg"), 1u);
  EXPECT_EQ(got.tensors.at("state.0.exp_avg").shape(), (pl::Shape{37, 11}))
      << "a whole range has the parameter's shape";
}

TEST(OptimizerShards, APartitionLayoutIsWhatAShardingStrategyMakes) {
  // the helpers themselves: W larger than some parameters, sizes not divisible by W
  const auto n = numels(params());  // 440 elements
  auto r0 = flat_partition(n, 3, 0);
  ASSERT_EQ(r0.size(), 1u);
  EXPECT_EQ(r0[0].param, 0u);
  EXPECT_EQ(r0[0].end, 147);
  auto r2 = flat_partition(n, 3, 2);
  ASSERT_FALSE(r2.empty());
  EXPECT_EQ(r2.front().param, 0u);
  EXPECT_EQ(r2.front().begin, 294);
  auto b = bucket_partition(n, 3, 1);
  EXPECT_GT(b.size(), 3u) << "rank 1 owns a chunk of every bucket";
}

TEST(OptimizerShards, AStateNeverSavedStaysAbsentAndOtherPiecesAreIgnored) {
  const auto ps = params();
  const auto n = numels(ps);
  // nothing saved for parameter 6 (never stepped): no state for it, no error
  std::vector<pl::ParamRange> saved;
  for (const auto& r : flat_partition(n, 1, 0))
    if (r.param != 6) saved.push_back(r);
  const std::vector<pl::ParamRange> wanted{{6, 0, 13}, {0, 5, 9}};
  OptimizerShards shards("ckpt", ps, wanted);
  Piece p = cut(ps, saved);
  shards.add("optimizer.safetensors", p.tensors, p.scalars);
  OptimizerState got = shards.finish();
  EXPECT_EQ(got.tensors.size(), 2u);  // parameter 0's elements 5..8, nothing else
  EXPECT_EQ(got.tensors.at("state.0.5-9.exp_avg").to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(got.scalars.count("state.6.step"), 0u);
}

std::string finish_error(const std::vector<pl::ParamRange>& wanted, const std::vector<Piece>& files) {
  OptimizerShards shards("/ckpt", params(), wanted);
  for (size_t r = 0; r < files.size(); ++r)
    shards.add("optimizer.rank" + std::to_string(r) + ".safetensors", files[r].tensors, files[r].scalars);
  return error_of([&] { shards.finish(); });
}

TEST(OptimizerShards, AGapIsAnErrorNamingTheElementsAndTheFiles) {
  const auto ps = params();
  const auto n = numels(ps);
  Piece r0 = cut(ps, flat_partition(n, 2, 0)), r1 = cut(ps, flat_partition(n, 2, 1));
  // rank 1 lost its part of big.weight's exp_avg (elements 220..406)
  r1.tensors.erase("state.0.220-407.exp_avg");
  std::string msg = finish_error({{0, 0, 407}}, {r0, r1});
  EXPECT_THAT(msg, HasSubstr("checkpoint /ckpt: the optimizer shards do not add up: parameter 0 (big.weight) field "
                             "exp_avg has elements [220, 407) in no file (files: optimizer.rank0.safetensors, "
                             "optimizer.rank1.safetensors)"));
  // a gap in the middle of a wanted range
  Piece a = cut(ps, {{6, 0, 4}}), b = cut(ps, {{6, 6, 13}});
  EXPECT_THAT(finish_error({{6, 2, 10}}, {a, b}),
              HasSubstr("parameter 6 (f) field exp_avg has elements [4, 6) in no file"));
  // a field present in part: exp_avg_sq only for the first half of the parameter
  Piece c = cut(ps, {{6, 0, 13}});
  c.tensors.erase("state.6.exp_avg_sq");
  c.tensors["state.6.0-6.exp_avg_sq"] = pl::Tensor::zeros({6});
  EXPECT_THAT(finish_error({{6, 0, 13}}, {c}), HasSubstr("field exp_avg_sq has elements [6, 13) in no file"));
  // ... or for one of this rank's ranges of the parameter and not the other
  Piece d = cut(ps, {{6, 0, 13}});
  d.tensors.erase("state.6.exp_avg_sq");
  d.tensors["state.6.0-3.exp_avg_sq"] = pl::Tensor::zeros({3});
  EXPECT_THAT(finish_error({{6, 0, 3}, {6, 9, 13}}, {d}),
              HasSubstr("field exp_avg_sq has elements [9, 13) in no file"));
  // the step counter missing for part of a range
  Piece e = cut(ps, {{6, 0, 6}}), f = cut(ps, {{6, 6, 13}});
  f.scalars.clear();
  EXPECT_THAT(finish_error({{6, 0, 13}}, {e, f}),
              HasSubstr("parameter 6 (f) scalar step has elements [6, 13) in no file"));
}

TEST(OptimizerShards, AnOverlapIsAnErrorNamingBothFiles) {
  const auto ps = params();
  Piece a = cut(ps, {{6, 0, 8}}), b = cut(ps, {{6, 5, 13}});
  std::string msg = finish_error({{6, 0, 13}}, {a, b});
  EXPECT_THAT(msg, HasSubstr("the optimizer shards do not add up: parameter 6 (f) field exp_avg has elements [5, 8) "
                             "twice: in optimizer.rank0.safetensors ('state.6.0-8.exp_avg') and in "
                             "optimizer.rank1.safetensors ('state.6.5-13.exp_avg')"));
  // whole-parameter state and a range of it (two layouts' files mixed)
  Piece w = cut(ps, {{3, 0, 3}}), p = cut(ps, {{3, 1, 2}});
  EXPECT_THAT(finish_error({{3, 0, 3}}, {w, p}), HasSubstr("elements [1, 2) twice"));
  // an overlap outside this rank's ranges is not this rank's to see
  EXPECT_EQ(sdk_test::error_or_none([&] {
              OptimizerShards s("/ckpt", ps, {{6, 10, 13}});
              s.add("x", a.tensors, a.scalars);
              s.add("y", b.tensors, b.scalars);
              s.finish();
            }),
            "(no error)");
}

TEST(OptimizerShards, StepCountersThatDisagreeAreAnError) {
  const auto ps = params();
  Piece a = cut(ps, {{0, 0, 200}}, 7), b = cut(ps, {{0, 200, 407}}, 8);
  std::string msg = finish_error({{0, 100, 300}}, {a, b});
  EXPECT_THAT(msg, HasSubstr("checkpoint /ckpt: the optimizer shards disagree: parameter 0 (big.weight) scalar step "
                             "is 7 in optimizer.rank0.safetensors ('state.0.0-200.step') but 8 in "
                             "optimizer.rank1.safetensors ('state.0.200-407.step')"));
  // ranges kept apart may have their own counters
  OptimizerShards s("/ckpt", ps, {{0, 0, 200}, {0, 200, 407}});
  s.add("x", a.tensors, a.scalars);
  s.add("y", b.tensors, b.scalars);
  OptimizerState got = s.finish();
  EXPECT_EQ(got.scalars.at("state.0.0-200.step"), 7);
  EXPECT_EQ(got.scalars.at("state.0.200-407.step"), 8);
}

TEST(OptimizerShards, PiecesThatDoNotFitTheParametersAreRefusedNamingTheFile) {
  const auto ps = params();
  auto add_error = [&](std::map<std::string, pl::Tensor> t, std::map<std::string, double> s = {}) {
    OptimizerShards shards("/ckpt", ps, {{0, 0, 407}});
    return error_of([&] { shards.add("optimizer.rank1.safetensors", t, s); });
  };
  EXPECT_THAT(add_error({{"momentum", pl::Tensor::zeros({1})}}),
              HasSubstr("checkpoint /ckpt: optimizer.rank1.safetensors has 'momentum', which is not an optimizer "
                        "state name"));
  EXPECT_THAT(add_error({{"state.8.exp_avg", pl::Tensor::zeros({1})}}),
              HasSubstr("'state.8.exp_avg' for parameter 8 but the optimizer has 8 parameters"));
  EXPECT_THAT(add_error({{"state.1.0-2.exp_avg", pl::Tensor::zeros({2})}}),
              HasSubstr("'state.1.0-2.exp_avg', elements [0, 2), which do not fit parameter 1 (a) of 1 elements"));
  EXPECT_THAT(add_error({{"state.2.1-1.exp_avg", pl::Tensor::zeros({0})}}), HasSubstr("which do not fit"));
  EXPECT_THAT(add_error({{"state.2.0-1.exp_avg", pl::Tensor::zeros({2})}}),
              HasSubstr("has 'state.2.0-1.exp_avg' as float32 [2] but parameter 2 (b) needs float32 with 1 elements"));
  EXPECT_THAT(add_error({{"state.2.exp_avg", pl::Tensor::zeros({2}, PL_F64)}}), HasSubstr("needs float32"));
  EXPECT_THAT(add_error({}, {{"state.9.step", 1}}), HasSubstr("'state.9.step' for parameter 9"));
  EXPECT_THAT(add_error({}, {{"state.x.step", 1}}), HasSubstr("not an optimizer state name"));
  // wanted ranges come from the strategy (checked there); still, nonsense is refused
  EXPECT_THAT(error_of([&] { OptimizerShards("/ckpt", ps, {{0, 0, 10}, {0, 5, 20}}); }), HasSubstr("overlap"));
  EXPECT_THAT(error_of([&] { OptimizerShards("/ckpt", ps, {{1, 0, 2}}); }), HasSubstr("is not inside parameter 1"));
}

TEST(OptimizerShards, StateNamesParse) {
  plrt::sdk::StateKey k;
  ASSERT_TRUE(plrt::sdk::parse_state_key("state.12.exp_avg", &k));
  EXPECT_EQ(k.param, 12u);
  EXPECT_TRUE(k.whole);
  EXPECT_EQ(k.field, "exp_avg");
  ASSERT_TRUE(plrt::sdk::parse_state_key("state.3.0-512.momentum_buffer", &k));
  EXPECT_FALSE(k.whole);
  EXPECT_EQ(k.begin, 0);
  EXPECT_EQ(k.end, 512);
  EXPECT_EQ(k.field, "momentum_buffer");
  for (const char* bad : {"lr", "step", "state.", "state.1", "state.1.", "state.-1.x", "state.1.2-.x", "state.1.2-3",
                          "state.1.2-3.", "state.a.x", "stat.1.x"})
    EXPECT_FALSE(plrt::sdk::parse_state_key(bad, &k)) << bad;
}

}  // namespace
