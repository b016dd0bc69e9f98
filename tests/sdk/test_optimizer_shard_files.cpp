// Sharded optimizer state through checkpoint files (read_optimizer_files, sdk/src/optimizer_shards.*)
// with real optimizers: W' simulated ranks each step only the ranges they own (the flat ZeRO
// partition), share the values after each step as a sharded strategy does, and write their own
// optimizer.rank<r>.safetensors as the trainer does; W other ranks load their ranges from those
// files, step on, and must equal, bit for bit, an optimizer that stepped every parameter whole all
// along (the independent reference: no sharding anywhere).  A whole-parameter optimizer.safetensors
// (ddp) loads into shards the same way.  Then the file errors: a missing rank file, a damaged one,
// one from another rank or another optimizer, a scalar that is not a number.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
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
#include <string>
#include <vector>

#include "optimizer_shards.hpp"
#include "sdk_test_support.hpp"

using ::testing::HasSubstr;

namespace {

namespace fs = std::filesystem;
using plrt::sdk::ShardParam;
using sdk_test::error_of;
using sdk_test::kCpu;
using sdk_test::runtime;

const pl::Accelerator& cpu() {
  static pl::Accelerator acc(runtime(), "cpu");
  return acc;
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/plrt-shards-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

const std::vector<pl::Shape> kShapes{{23, 7}, {3}, {1}, {5}, {2, 2}};  // 161, 3, 1, 5, 4 elements

std::vector<int64_t> numels() {
  std::vector<int64_t> n;
  for (const auto& s : kShapes) n.push_back(std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()));
  return n;
}

// The flat (ZeRO) partition of every element into `world` near-equal chunks (as in
// test_optimizer_shards.cpp): rank r's parts of each parameter.
std::vector<pl::ParamRange> partition(int world, int rank) {
  const auto n = numels();
  const int64_t total = std::accumulate(n.begin(), n.end(), int64_t{0});
  auto start = [&](int r) { return total / world * r + std::min<int64_t>(r, total % world); };
  std::vector<pl::ParamRange> out;
  int64_t at = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const int64_t b = std::max(start(rank), at), e = std::min(start(rank + 1), at + n[i]);
    if (b < e) out.push_back({i, b - at, e - at});
    at += n[i];
  }
  return out;
}

std::vector<ShardParam> shard_params() {
  std::vector<ShardParam> out;
  for (size_t i = 0; i < kShapes.size(); ++i) out.push_back({"p" + std::to_string(i), kShapes[i], PL_F32});
  return out;
}

// One rank's copy of the model's parameters (float32 on the cpu accelerator).
struct Replica {
  std::deque<pl::Parameter> p;
  Replica() {
    for (size_t i = 0; i < kShapes.size(); ++i) {
      pl::Parameter x;
      x.value = pl::Tensor::zeros(cpu(), kCpu, kShapes[i], PL_F32);
      float* v = x.value.data_ptr<float>();
      for (int64_t k = 0; k < x.value.numel(); ++k) v[k] = 0.1f * static_cast<float>((k * 7 + i) % 13) - 0.5f;
      x.grad = pl::Tensor::zeros(cpu(), kCpu, kShapes[i], PL_F32);
      p.push_back(x);
    }
  }
  std::vector<pl::Parameter*> ptrs() {
    std::vector<pl::Parameter*> out;
    for (auto& x : p) out.push_back(&x);
    return out;
  }
  void grads(int step) {
    for (size_t i = 0; i < p.size(); ++i) {
      float* g = p[i].grad.data_ptr<float>();
      for (int64_t k = 0; k < p[i].grad.numel(); ++k)
        g[k] = static_cast<float>(std::sin(0.7 * step + 0.31 * static_cast<double>(k) + static_cast<double>(i)));
      p[i].grad_is_zero = false;
    }
  }
  std::vector<std::vector<float>> values() const {
    std::vector<std::vector<float>> out;
    for (const auto& x : p) out.push_back(x.value.to_vector<float>());
    return out;
  }
  void set(const std::vector<std::vector<float>>& v) {
    for (size_t i = 0; i < p.size(); ++i) std::copy(v[i].begin(), v[i].end(), p[i].value.data_ptr<float>());
  }
};

using Make = std::function<std::unique_ptr<pl::Optimizer>(std::vector<pl::Parameter*>)>;
std::vector<std::pair<std::string, Make>> optimizers() {
  return {{"Adam",
           [](auto p) {
             return std::make_unique<pl::Adam>(p, pl::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.01});
           }},
          {"SGD", [](auto p) {
             return std::make_unique<pl::SGD>(p, pl::SgdOptions{0.05, 0.9, 0, 0.01, true});
           }}};
}

// `world` ranks of a sharded run: each steps its own ranges, then every rank takes every other's
// updated elements (the strategy's gather).
struct ShardedRun {
  std::vector<Replica> ranks;
  std::vector<std::unique_ptr<pl::Optimizer>> opts;
  int world;
  ShardedRun(int w, const Make& make, const std::vector<std::vector<float>>& values) : ranks(w), world(w) {
    for (auto& r : ranks) r.set(values), opts.push_back(make(r.ptrs()));
  }
  void step(int s) {
    for (int r = 0; r < world; ++r) ranks[r].grads(s), opts[r]->step(partition(world, r));
    auto combined = ranks[0].values();
    for (int r = 0; r < world; ++r) {
      const auto mine = ranks[r].values();
      for (const auto& pr : partition(world, r))
        std::copy(mine[pr.param].begin() + pr.begin, mine[pr.param].begin() + pr.end,
                  combined[pr.param].begin() + pr.begin);
    }
    for (auto& r : ranks) r.set(combined);
  }
};

std::string g17(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// What the trainer writes: the state tensors, the name and scalars in the metadata (and, for a
// rank file, its rank and world size).
void write(const std::string& path, const pl::Optimizer& o, int rank = -1, int world = 0) {
  std::map<std::string, std::string> meta{{"optimizer", o.name()}};
  for (const auto& [k, v] : o.state_scalars()) meta[k] = g17(v);
  if (rank >= 0) meta["shard_rank"] = std::to_string(rank), meta["shard_world_size"] = std::to_string(world);
  pl::safetensors::save(path, o.state_tensors(), meta);
}

std::vector<std::string> rank_files(int world) {
  std::vector<std::string> f;
  for (int r = 0; r < world; ++r) f.push_back(plrt::sdk::optimizer_rank_file(r));
  return f;
}

TEST(OptimizerShardFiles, ResumedAtAnyWorldSizeTheShardsStepOnLikeTheWholeOptimizer) {
  constexpr int kBefore = 3, kAfter = 3;
  for (const auto& [what, make] : optimizers()) {
    Replica ref;  // every parameter whole, every step: the reference
    auto ref_opt = make(ref.ptrs());
    const auto init = ref.values();
    for (int s = 0; s < kBefore; ++s) ref.grads(s), ref_opt->step();
    const auto at_save = ref.values();
    std::vector<std::vector<std::vector<float>>> ref_after;
    {
      Replica cont;
      cont.set(at_save);
      auto cont_opt = make(cont.ptrs());
      std::map<std::string, pl::Tensor> t;
      for (const auto& [k, v] : ref_opt->state_tensors()) t[k] = v.clone();
      cont_opt->load_state(t, ref_opt->state_scalars());
      for (int s = kBefore; s < kBefore + kAfter; ++s)
        cont.grads(s), cont_opt->step(), ref_after.push_back(cont.values());
    }
    for (int saved = 1; saved <= 4; ++saved) {
      TempDir dir;
      std::vector<std::string> files;
      if (saved == 1) {  // ddp / single_device: one file, whole parameters
        write(dir.str() + "/optimizer.safetensors", *ref_opt);
        files = {"optimizer.safetensors"};
      } else {
        ShardedRun run(saved, make, init);
        for (int s = 0; s < kBefore; ++s) run.step(s);
        ASSERT_EQ(run.ranks[0].values(), at_save) << what << ": a sharded run is not the whole run";
        for (int r = 0; r < saved; ++r)
          write(dir.str() + "/" + plrt::sdk::optimizer_rank_file(r), *run.opts[r], r, saved);
        files = rank_files(saved);
      }
      for (int world = 1; world <= 3; ++world) {
        const std::string label = what + " W'=" + std::to_string(saved) + " -> W=" + std::to_string(world);
        ShardedRun resumed(world, make, at_save);
        for (int r = 0; r < world; ++r) {
          auto state =
              plrt::sdk::read_optimizer_files(dir.str(), files, make({})->name(), shard_params(), partition(world, r));
          resumed.opts[r]->load_state(state.tensors, state.scalars);
          EXPECT_EQ(resumed.opts[r]->steps(), kBefore) << label;
          EXPECT_EQ(resumed.opts[r]->lr(), ref_opt->lr()) << label;
        }
        for (int s = 0; s < kAfter; ++s) {
          resumed.step(kBefore + s);
          EXPECT_EQ(resumed.ranks[0].values(), ref_after[static_cast<size_t>(s)]) << label << " step " << kBefore + s;
        }
      }
    }
  }
}

// A checkpoint of 2 Adam ranks, for the error cases.
struct TwoRanks {
  TempDir dir;
  TwoRanks() {
    ShardedRun run(2, optimizers()[0].second, Replica().values());
    run.step(0);
    for (int r = 0; r < 2; ++r) write(file(r), *run.opts[r], r, 2);
  }
  std::string file(int r) const { return dir.str() + "/" + plrt::sdk::optimizer_rank_file(r); }
  std::string load(const std::string& optimizer = "Adam", std::vector<std::string> files = rank_files(2)) const {
    return error_of(
        [&] { plrt::sdk::read_optimizer_files(dir.str(), files, optimizer, shard_params(), partition(3, 1)); });
  }
};

TEST(OptimizerShardFiles, AMissingRankFileIsNamed) {
  TwoRanks c;
  fs::remove(c.file(1));
  EXPECT_THAT(c.load(), HasSubstr("checkpoint " + c.dir.str() +
                                  " lacks optimizer.rank1.safetensors (trainer.json says each of its 2 ranks wrote "
                                  "its optimizer state: optimizer.rank0.safetensors to optimizer.rank1.safetensors)"));
}

TEST(OptimizerShardFiles, ADamagedFileIsNamed) {
  TwoRanks c;
  std::string bytes = pl::read_file(c.file(1));
  pl::write_file_atomic(c.file(1), bytes.substr(0, bytes.size() - 9));
  EXPECT_THAT(c.load(), HasSubstr("checkpoint " + c.dir.str() + ": optimizer.rank1.safetensors is damaged: "));
  // a scalar that is not a number
  auto f = pl::safetensors::load(c.file(0));
  f.metadata["lr"] = "fast";
  std::vector<std::pair<std::string, pl::Tensor>> t(f.tensors.begin(), f.tensors.end());
  pl::safetensors::save(c.file(0), t, f.metadata);
  EXPECT_THAT(c.load(), HasSubstr("optimizer.rank0.safetensors is damaged: its scalar 'lr' is 'fast', not a number"));
}

TEST(OptimizerShardFiles, AnotherRanksOrAnotherCheckpointsFileIsRefused) {
  TwoRanks c;
  fs::copy_file(c.file(0), c.file(1), fs::copy_options::overwrite_existing);
  EXPECT_THAT(c.load(),
              HasSubstr("optimizer.rank1.safetensors says it is rank '0' of '2' but it should be rank 1 of 2"));
  // three files where two were written
  TwoRanks d;
  fs::copy_file(d.file(1), d.dir.str() + "/optimizer.rank2.safetensors");
  EXPECT_THAT(d.load("Adam", rank_files(3)), HasSubstr("optimizer.rank0.safetensors says it is rank '0' of '2' but "
                                                       "it should be rank 0 of 3"));
}

TEST(OptimizerShardFiles, AnotherOptimizersStateIsRefused) {
  TwoRanks c;
  EXPECT_THAT(c.load("SGD"), HasSubstr("optimizer.rank0.safetensors holds Adam optimizer state but "
                                       "configure_optimizers made SGD"));
}

TEST(OptimizerShardFiles, AFileMissingAPieceLeavesAGap) {
  TwoRanks c;
  auto f = pl::safetensors::load(c.file(1));
  std::vector<std::pair<std::string, pl::Tensor>> t;
  for (auto& [k, v] : f.tensors)
    if (k != "state.0.87-161.exp_avg") t.emplace_back(k, v);
  ASSERT_EQ(t.size() + 1, f.tensors.size()) << "rank 1 of 2 owns elements 87.. of p0 (174 elements in all)";
  pl::safetensors::save(c.file(1), t, f.metadata);
  EXPECT_THAT(c.load(), HasSubstr("the optimizer shards do not add up: parameter 0 (p0) field exp_avg has elements "
                                  "[87, 116) in no file (files: optimizer.rank0.safetensors, "
                                  "optimizer.rank1.safetensors)"));
}

TEST(OptimizerShardFiles, ASingleFileLoadsAsSaved) {
  // an unsharded optimizer reads optimizer.safetensors as it was written (partial ranges included)
  TempDir dir;
  Replica r;
  pl::SGD sgd(r.ptrs(), pl::SgdOptions{0.05, 0.9, 0, 0, false});
  r.grads(0);
  sgd.step({{0, 0, 50}, {3, 0, 5}});
  write(dir.str() + "/optimizer.safetensors", sgd);
  auto s = plrt::sdk::read_optimizer_file(dir.str(), "optimizer.safetensors", "SGD");
  EXPECT_EQ(s.tensors.size(), 2u);
  EXPECT_EQ(s.tensors.count("state.0.0-50.momentum_buffer"), 1u);
  EXPECT_EQ(s.tensors.count("state.3.momentum_buffer"), 1u);
  EXPECT_EQ(s.scalars, sgd.state_scalars());
}

}  // namespace
