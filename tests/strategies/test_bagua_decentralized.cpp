// decentralized (docs/bagua.md §3) against a reference that replays every rank in plain loops: each
// rank's gradient at its own weights; every communication_interval steps the weights averaged
// (all: the mean over the ranks; shift_one: (x + x_peer) * 0.5 with the pairings docs/bagua.md
// lists, written here as a table, not the formula); then x -= lr * g.  And the per-rank
// checkpoint (its values and counters), and the bad inputs.  Hierarchical (nodes of two ranks):
// each node's mean first (summed in rank order, then divided, as the process group's AVG), the
// average above among the nodes, and every rank of a node takes the result.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "bagua_harness.hpp"
#include "bagua_state_file.hpp"

namespace {

using namespace baguatest;

constexpr int kSteps = 16;
constexpr float kLr = 0.1f;
using Options = std::vector<std::pair<std::string, std::string>>;

// Rank i's peer at exchange k: docs/bagua.md's pairings (n = 4: 0-2 and 1-3 at k = 0, then 0-3 and
// 1-2, then again).  rotate=false keeps the first pairing (a broken shift_one, for the check that
// the rotation shows).
int peer(int world, int i, int k, bool rotate = true) {
  if (world == 2) return 1 - i;
  static const int kFour[2][4] = {{2, 3, 0, 1}, {3, 2, 1, 0}};
  return kFour[rotate ? k % 2 : 0][i];
}

// per_node > 1: hierarchical, the average among the nodes' means.
std::vector<Weights> reference(int world, bool shift_one, int interval, bool rotate = true, int per_node = 1) {
  std::vector<Weights> x(static_cast<size_t>(world), initial(0));  // rank 0's values, broadcast at setup
  int exchanges = 0;
  const int n = world / per_node;
  for (int k = 0; k < kSteps; ++k) {
    std::vector<Weights> g;
    for (int r = 0; r < world; ++r) g.push_back(gradient(x[r], r, k));  // at the weights before the average
    if (k % interval == 0) {
      std::vector<Weights> m(static_cast<size_t>(n));  // the nodes' means (the ranks' x when flat)
      for (int v = 0; v < n; ++v) {
        m[v] = x[v * per_node];
        if (per_node == 1) continue;
        for (int j = 1; j < per_node; ++j)
          for (int i = 0; i < kParams; ++i) m[v][i] += x[v * per_node + j][i];
        for (float& e : m[v]) e /= static_cast<float>(per_node);
      }
      std::vector<Weights> y = m;
      for (int v = 0; v < n; ++v)
        for (int i = 0; i < kParams; ++i) {
          if (shift_one) {
            y[v][i] = (m[v][i] + m[peer(n, v, exchanges, rotate)][i]) * 0.5f;
          } else {
            float sum = 0;
            for (int q = 0; q < n; ++q) sum += m[q][i];
            y[v][i] = sum / static_cast<float>(n);
          }
        }
      for (int r = 0; r < world; ++r) x[r] = y[r / per_node];
      ++exchanges;
    }
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < kParams; ++i) x[r][i] -= kLr * g[r][i];
  }
  return x;
}

// The largest difference over the ranks.
double max_diff(const std::vector<Weights>& a, const std::vector<Weights>& b) {
  double m = 0;
  for (size_t r = 0; r < a.size(); ++r) m = std::max(m, max_abs_diff(a[r], b[r]));
  return m;
}

TEST(Decentralized, AllMatchesReference) {
  for (int world : {2, 4}) {
    const TrainResult got =
        train("bagua_decentralized", world, {}, kSteps, kLr, {"exchanges", "bytes_per_step", "weight_comm_ms"});
    const std::vector<Weights> want = reference(world, false, 1);
    // The process group's mean sums in its own order (exact at two ranks).
    EXPECT_LE(max_diff(got.weights, want), world == 2 ? 0.0 : 1e-6) << "W=" << world;
    // The ranks differ after the last local step: the gradients are not averaged.
    EXPECT_GT(max_abs_diff(got.weights[0], got.weights[1]), 1e-4);
    for (int r = 0; r < world; ++r) {
      const auto& st = got.stats[r];
      EXPECT_EQ(st.at("exchanges"), kSteps);
      EXPECT_EQ(st.at("bytes_per_step"), 4.0 * kParams);  // the values, once a step
      EXPECT_GT(st.at("weight_comm_ms"), 0);
    }
  }
}

TEST(Decentralized, ShiftOneMatchesReference) {
  for (int world : {2, 4}) {
    for (const char* bucket_mb : {"10", "0.00001"}) {  // one bucket; one per parameter
      const TrainResult got =
          train("bagua_decentralized", world, {{"peer_selection_mode", "shift_one"}, {"bucket_size_mb", bucket_mb}},
                kSteps, kLr, {"exchanges", "bytes_per_step"});
      const std::vector<Weights> want = reference(world, true, 1);
      for (int r = 0; r < world; ++r)
        EXPECT_EQ(got.weights[r], want[r]) << "W=" << world << " rank " << r << " bucket_size_mb " << bucket_mb;
      EXPECT_EQ(got.stats[0].at("exchanges"), kSteps);
      EXPECT_EQ(got.stats[0].at("bytes_per_step"), 4.0 * kParams);
      if (world == 4) {
        // The pairing rotates: a shift_one that kept its first peer is measurably different, and so
        // is averaging over all ranks.
        EXPECT_GT(max_diff(got.weights, reference(world, true, 1, false)), 1e-4);
        EXPECT_GT(max_diff(got.weights, reference(world, false, 1)), 1e-4);
      }
    }
  }
}

// Hierarchical: two nodes of two ranks averaging over all, four nodes of two pairing their leaders
// with shift_one (the pairing among 4 nodes, not 8 ranks); bit for bit (every mean here is of two).
TEST(Decentralized, HierarchicalAveragesTheNodesMeansAmongTheLeaders) {
  for (const auto& [world, shift_one] : std::vector<std::pair<int, bool>>{{4, false}, {8, true}}) {
    Options opts;
    if (shift_one) opts.emplace_back("peer_selection_mode", "shift_one");
    const int nodes = world / 2;
    const TrainResult got =
        train_on_nodes("bagua_decentralized", world, nodes, opts, kSteps, kLr, {"exchanges", "hierarchical"});
    const std::vector<Weights> want = reference(world, shift_one, 1, true, 2);
    for (int r = 0; r < world; ++r) EXPECT_EQ(got.weights[r], want[r]) << "W=" << world << " rank " << r;
    EXPECT_EQ(got.stats[1].at("exchanges"), kSteps);
    EXPECT_EQ(got.stats[1].at("hierarchical"), 1);
    // The pairing shows: averaging over all the nodes ends elsewhere.
    if (shift_one) {
      EXPECT_GT(max_diff(got.weights, reference(world, false, 1, true, 2)), 1e-4);
    }
  }
}

TEST(Decentralized, CommunicationIntervalTwoAveragesEveryOtherStep) {
  for (const auto& [world, shift_one] : std::vector<std::pair<int, bool>>{{2, false}, {4, true}}) {
    Options opts{{"communication_interval", "2"}};
    if (shift_one) opts.emplace_back("peer_selection_mode", "shift_one");
    std::vector<double> exchanges(kSteps, -1);
    const TrainResult got = train("bagua_decentralized", world, opts, kSteps, kLr, {}, [&](baguatest::Run& run, int k) {
      if (run.rank == 0) exchanges[k] = run.strategy->stat("exchanges");
    });
    for (int k = 0; k < kSteps; ++k) EXPECT_EQ(exchanges[k], k / 2 + 1) << "after step " << k;
    EXPECT_LE(max_diff(got.weights, reference(world, shift_one, 2)), world == 2 || shift_one ? 0.0 : 1e-6);
    EXPECT_GT(max_diff(got.weights, reference(world, shift_one, 1)), 1e-4) << "interval 2 is not interval 1";
  }
}

TEST(Decentralized, WorldOneTrainsAlone) {
  const TrainResult got = train("bagua_decentralized", 1, {}, kSteps, kLr, {"exchanges", "bytes_per_step"});
  EXPECT_EQ(got.weights[0], reference(1, false, 1)[0]);
  EXPECT_EQ(got.stats[0].at("exchanges"), 0);
  EXPECT_EQ(got.stats[0].at("bytes_per_step"), 0);
}

// save_state after 7 steps, then a fresh instance: setup (rank 0's values broadcast), load_state,
// the host's load of rank 0's model, steps 7..15: the same weights as the run never interrupted,
// on every rank.  Without load_state the ranks would restart from rank 0's values and the counters
// from 0 (the shift_one pairing and the interval's phase), which the last check shows differs.
void expect_resumes_exactly(const std::string& name, int world, const Options& opts) {
  const TrainResult full = train(name, world, opts, kSteps, kLr, {"exchanges"});
  TempDir dir;
  constexpr int kSaveAfter = 7;
  const TrainResult part = train(name, world, opts, kSaveAfter, kLr, {}, [&](baguatest::Run& run, int k) {
    if (k == kSaveAfter - 1) save_state(run, dir.str());
  });
  for (int r = 0; r < world; ++r) {  // each rank's file holds its own values
    const StateFile f = read_state_file(dir.file(r));
    EXPECT_EQ(f.rank, r);
    EXPECT_EQ(f.world, world);
    Weights x = f.f32("x/0/fc.weight");
    const std::vector<float> b = f.f32("x/1/fc.bias");
    x.insert(x.end(), b.begin(), b.end());
    EXPECT_EQ(x, part.weights[r]) << name << " rank " << r;
  }
  auto resume = [&](bool load) {
    Resume from{kSaveAfter, [&](baguatest::Run& run) {
                  if (load) load_state(run, dir.str(), world);
                  std::copy(part.weights[0].begin(), part.weights[0].end(), run.x->begin());  // the host's model
                }};
    return train(name, world, opts, kSteps, kLr, {"exchanges"}, nullptr, from);
  };
  const TrainResult resumed = resume(true);
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(resumed.weights[r], full.weights[r]) << name << " W=" << world << " rank " << r;
  EXPECT_EQ(resumed.stats[0].at("exchanges"), full.stats[0].at("exchanges"));
  EXPECT_GT(max_diff(resume(false).weights, full.weights), 1e-5) << "the checkpoint made no difference";
}

TEST(Decentralized, CheckpointResumesExactly) {
  expect_resumes_exactly("bagua_decentralized", 2, {});
  expect_resumes_exactly("bagua_decentralized", 4,
                         {{"peer_selection_mode", "shift_one"}, {"communication_interval", "2"}});
}

TEST(LowPrecisionDecentralized, CheckpointResumesExactly) {
  expect_resumes_exactly("bagua_low_precision_decentralized", 2, {});
  expect_resumes_exactly("bagua_low_precision_decentralized", 4, {{"communication_interval", "3"}});
}

// ---- bad inputs: clear errors, before any work ----

// The message of creating strategy `name` with `options` at rank 0 of `world`, "" when it succeeds.
std::string create_error(const std::string& name, int world, const Options& options, PL_ErrorCode* code = nullptr) {
  pl::Runtime rt(strattest::runtime_options());
  ddptest::StrategyConfig c;
  c.world = world;
  c.accelerator = pl::Accelerator(rt, "cpu");
  c.options = options;
  try {
    ddptest::Strategy s(rt, name, c);
  } catch (const pl::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DecentralizedErrors, ShiftOneNeedsAnEvenWorldSize) {
  PL_ErrorCode code = PL_ERR_OK;
  const std::string m = create_error("bagua_decentralized", 3, {{"peer_selection_mode", "shift_one"}}, &code);
  EXPECT_EQ(code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(has(m, "shift_one") && has(m, "even") && has(m, "has 3 processes")) << m;
}

TEST(DecentralizedErrors, BadOptionValues) {
  for (const char* name : {"bagua_decentralized", "bagua_low_precision_decentralized"}) {
    PL_ErrorCode code = PL_ERR_OK;
    std::string m = create_error(name, 1, {{"communication_interval", "0"}}, &code);
    EXPECT_EQ(code, PL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(has(m, "communication_interval='0'") && has(m, ">= 1")) << m;
    m = create_error(name, 1, {{"communication_interval", "two"}});
    EXPECT_TRUE(has(m, "communication_interval='two'")) << m;
  }
  std::string m = create_error("bagua_decentralized", 1, {{"peer_selection_mode", "bogus"}});
  EXPECT_TRUE(has(m, "peer_selection_mode='bogus'") && has(m, "all") && has(m, "shift_one")) << m;
  m = create_error("bagua_low_precision_decentralized", 1, {{"peer_selection_mode", "all"}});
  EXPECT_TRUE(has(m, "does not apply") && has(m, "applies to decentralized")) << m;
  EXPECT_EQ(create_error("bagua_decentralized", 1, {{"communication_interval", "5"}}), "");
}

// The state entries: has_state, and save/load need setup.
TEST(DecentralizedErrors, StateEntriesNeedSetup) {
  for (const char* name : {"bagua_decentralized", "bagua_low_precision_decentralized"}) {
    pl::Runtime rt(strattest::runtime_options());
    ddptest::StrategyConfig c;
    c.accelerator = pl::Accelerator(rt, "cpu");
    ddptest::Strategy s(rt, name, c);
    PL_StrategyStateInfo info{};
    info.struct_size = sizeof info;
    pl::check(rt.host(), s.api()->state_info(s.get(), &info));
    EXPECT_EQ(info.has_state, 1) << name;
    EXPECT_EQ(info.any_world_size, 0) << name;
    TempDir dir;
    for (const bool load : {false, true}) {
      PL_Error* e =
          load ? s.api()->load_state(s.get(), dir.str().c_str(), 1) : s.api()->save_state(s.get(), dir.str().c_str());
      ASSERT_NE(e, nullptr) << name;
      const std::string m = pl_error_message(e);
      EXPECT_EQ(pl_error_code(e), PL_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(has(m, load ? "load_state was called before setup" : "save_state was called before setup")) << m;
      pl_error_destroy(e);
    }
  }
}

// After two steps every rank saves; then load_state from another world size, from a damaged file,
// a truncated one and a missing one: each an INVALID_ARGUMENT naming the sizes or the file.
TEST(DecentralizedErrors, LoadStateRefusesOtherWorldSizesAndDamagedFiles) {
  for (const char* name : {"bagua_decentralized", "bagua_low_precision_decentralized"}) {
    TempDir dir;
    std::vector<std::vector<std::pair<PL_ErrorCode, std::string>>> errors(2);
    train(name, 2, {}, 2, kLr, {}, [&](baguatest::Run& run, int k) {
      if (k != 1) return;
      save_state(run, dir.str());
      const std::string file = dir.file(run.rank);
      auto attempt = [&](int saved_world) {
        try {
          load_state(run, dir.str(), saved_world);
          errors[run.rank].emplace_back(PL_ERR_OK, "");
        } catch (const pl::Error& e) {
          errors[run.rank].emplace_back(e.code(), e.what());
        }
      };
      attempt(4);
      std::vector<uint8_t> bytes = read_bytes(file);
      std::vector<uint8_t> damaged = bytes;
      damaged[damaged.size() / 2] ^= 0x5a;
      std::ofstream(file, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(damaged.data()), static_cast<std::streamsize>(damaged.size()));
      attempt(2);
      std::ofstream(file, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()), 30);
      attempt(2);
      std::filesystem::remove(file);
      attempt(2);
      std::ofstream(file, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      attempt(2);  // whole again: loads
    });
    for (int r = 0; r < 2; ++r) {
      const auto& e = errors[r];
      ASSERT_EQ(e.size(), 5u) << name;
      const std::string file = dir.file(r);
      EXPECT_EQ(e[0].first, PL_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(has(e[0].second, "world size 4") && has(e[0].second, "world size 2")) << e[0].second;
      for (int i = 1; i <= 3; ++i) {
        EXPECT_EQ(e[i].first, PL_ERR_INVALID_ARGUMENT) << e[i].second;
        EXPECT_TRUE(has(e[i].second, file)) << e[i].second;
      }
      EXPECT_TRUE(has(e[1].second, "damaged")) << e[1].second;
      EXPECT_TRUE(has(e[2].second, "damaged")) << e[2].second;
      EXPECT_TRUE(has(e[3].second, "missing")) << e[3].second;
      EXPECT_EQ(e[4].first, PL_ERR_OK) << e[4].second;
    }
  }
}

// A state file of another rank or algorithm is refused, naming it.
TEST(DecentralizedErrors, LoadStateRefusesAnotherRanksOrAlgorithmsFile) {
  TempDir dir;
  std::vector<std::string> errors(2);
  std::atomic<bool> saved0{false};
  train("bagua_decentralized", 2, {}, 1, kLr, {}, [&](baguatest::Run& run, int) {
    save_state(run, dir.str());
    if (run.rank == 0) saved0 = true;
    // Rank 1 (a thread of its own) swaps in rank 0's file under its own name once rank 0 wrote it.
    if (run.rank == 1) {
      while (!saved0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::filesystem::copy_file(dir.file(0), dir.file(1), std::filesystem::copy_options::overwrite_existing);
      try {
        load_state(run, dir.str(), 2);
      } catch (const pl::Error& e) {
        errors[1] = e.what();
      }
    }
  });
  EXPECT_TRUE(has(errors[1], dir.file(1)) && has(errors[1], "at rank 0 of 2")) << errors[1];
  // decentralized reading low_precision_decentralized's files
  TempDir lp;
  train("bagua_low_precision_decentralized", 2, {}, 1, kLr, {},
        [&](baguatest::Run& run, int) { save_state(run, lp.str()); });
  std::vector<std::string> other(2);
  train("bagua_decentralized", 2, {}, 0, kLr, {}, nullptr, Resume{0, [&](baguatest::Run& run) {
                                                                    try {
                                                                      load_state(run, lp.str(), 2);
                                                                    } catch (const pl::Error& e) {
                                                                      other[run.rank] = e.what();
                                                                    }
                                                                  }});
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(has(other[r], lp.file(r)) && has(other[r], "algorithm low_precision_decentralized") &&
                has(other[r], "this is algorithm decentralized"))
        << other[r];
}

}  // namespace
