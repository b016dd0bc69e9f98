// async (docs/bagua.md §5) through the bagua plugin's C table, ranks as threads (gloo on loopback),
// on bagua_harness.hpp's tiny model with plain SGD, against references in plain loops:
//  - the warmup steps are gradient_allreduce, bit for bit, and the plain-loop mean of the gradients;
//  - sync_weights (ABI 1.6) leaves every rank with the mean of the ranks' weights, bit for bit;
//  - one round with the training paused: x + (mean - x), exactly, round after round;
//  - rounds while training keep the mean over the ranks: what the ranks' optimizers applied, no more
//    and no less (x += mean - snapshot keeps the steps taken while a round communicates);
//  - pauses and restarts; 20 start/stop cycles, with the thread running at teardown; a rank that
//    tears down while the others train fails their next step; the loss scaler's verdict is each
//    rank's own after warmup; bad options and misuse.
// A rank killed mid-run: tests/training/test_bagua.cpp (processes, through the trainer).
#include <gmock/gmock.h>

#include <chrono>
#include <condition_variable>
#include <thread>

#include "bagua_harness.hpp"
#include "expect_error.hpp"

namespace {

using namespace baguatest;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using Options = std::vector<std::pair<std::string, std::string>>;

constexpr float kLr = 0.1f;

// One rank: the tiny model (its values and gradients in host memory) under a bagua strategy.
class Rank {
 public:
  Rank(const pl::Runtime& rt, PL_Store* store, int rank, int world, const std::string& name, const Options& options)
      : host_(rt.host()),
        rank_(rank),
        c_(rank_config(rt, store, rank, world, options)),
        x(initial(rank)),
        g(kParams, 0.0f),
        applied(kParams, 0.0) {
    s = std::make_unique<ddptest::Strategy>(rt, name, c_);
    params_ = tiny_params(x, g);
  }
  void setup() { s->setup(params_); }

  // One training step on batch k with SGD at `lr`; in_lock runs inside run_step (forward and
  // backward: the weights lock is held) after the gradient is computed.
  void step(int k, float lr, const std::function<void()>& in_lock = nullptr) {
    s->run_step([&](PL_Device, PL_Parameter*, size_t) {
      const Weights fresh = gradient(x, rank_, k);
      std::copy(fresh.begin(), fresh.end(), g.begin());
      if (in_lock) in_lock();
      s->on_grad_ready(1);
      s->on_grad_ready(0);
    });
    s->after_backward();
    const PL_StrategyApi* api = s->api();
    pl::check(host(), api->before_optimizer_step(s->get()));
    struct Sgd {
      Rank* r;
      float lr;
    } sgd{this, lr};
    PL_OptimizerFn fn{};
    fn.struct_size = sizeof fn;
    fn.user = &sgd;
    fn.step = [](void* user, const PL_ParamRange* ranges, size_t n) -> PL_Error* {
      auto* o = static_cast<Sgd*>(user);
      for (size_t i = 0; i < n; ++i) {
        const int64_t off = ranges[i].param_index == 0 ? 0 : kWeights;
        for (int64_t j = ranges[i].begin; j < ranges[i].end; ++j) {
          o->r->x[off + j] -= o->lr * o->r->g[off + j];
          o->r->applied[off + j] += static_cast<double>(o->lr * o->r->g[off + j]);
        }
      }
      return nullptr;
    };
    pl::check(host(), api->optimizer_step(s->get(), &fn));
    s->after_optimizer_step();
  }
  void sync() { pl::check(host(), s->api()->sync_weights(s->get())); }
  double stat(const std::string& n) { return s->stat(n); }
  // Sleeps (no steps) until this rank's thread has run `n` rounds; false after 10 s.
  bool wait_rounds(double n) {
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (stat("async_rounds") < n)
      if (Clock::now() > end)
        return false;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  }
  const PL_Host* host() const { return host_; }
  int rank() const { return rank_; }

 private:
  const PL_Host* host_;
  int rank_;
  ddptest::StrategyConfig c_;
  std::vector<PL_Parameter> params_;

 public:
  Weights x, g;
  std::vector<double> applied;  // what this rank's optimizer subtracted, summed (double)
  std::unique_ptr<ddptest::Strategy> s;
};

// Runs body(rank) on `world` ranks as threads with a fresh store; each rank set up first and torn
// down after (unless the body did).  Fails the test on any rank's error.
void run_job(const std::string& name, int world, const Options& options, const std::function<void(Rank&)>& body) {
  const auto failures = strattest::run_ranks(world, "bagua-async", [&](int rank, int port) {
    pl::Runtime rt(strattest::runtime_options());
    pl::Store store(rt, strattest::store_client(port, "bagua-async"));
    Rank r(rt, store.get(), rank, world, name, options);
    r.setup();
    body(r);
    r.s->teardown();
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

// The plain-loop reference of `steps` steps of gradient_allreduce (the mean of every rank's
// gradient at the common weights, summed in rank order) and SGD, from rank 0's values.
Weights allreduce_reference(int world, int steps) {
  Weights x = initial(0);
  for (int k = 0; k < steps; ++k) {
    Weights mean(kParams, 0.0f);
    for (int r = 0; r < world; ++r) {
      const Weights g = gradient(x, r, k);
      for (int i = 0; i < kParams; ++i) mean[i] += g[i];
    }
    for (int i = 0; i < kParams; ++i) x[i] -= kLr * (mean[i] / static_cast<float>(world));
  }
  return x;
}

// Rank r's weights after `steps` local SGD steps from rank 0's values (nothing averaged).
Weights local_reference(int rank, int steps) {
  Weights x = initial(0);
  for (int k = 0; k < steps; ++k) {
    const Weights g = gradient(x, rank, k);
    for (int i = 0; i < kParams; ++i) x[i] -= kLr * g[i];
  }
  return x;
}

// The first warmup_steps steps are gradient_allreduce: the same weights as algorithm
// gradient_allreduce, bit for bit, and as the plain-loop mean; no round runs meanwhile and a step
// communicates the gradient buckets.  After warmup the rounds start and a step communicates nothing.
TEST(Async, WarmupStepsAreGradientAllreduce) {
  constexpr int kWarm = 6;
  for (int world : {2, 4}) {
    std::vector<Weights> warm(world), ga(world), end(world);
    std::vector<std::map<std::string, double>> during(world), after(world);
    run_job("bagua_async", world, {{"warmup_steps", std::to_string(kWarm)}, {"sync_interval_ms", "1"}}, [&](Rank& r) {
      for (int k = 0; k < kWarm; ++k) r.step(k, kLr);
      const size_t me = static_cast<size_t>(r.rank());
      warm[me] = r.x;  // no thread yet: it starts at the first step after warmup
      for (const char* n : {"async_rounds", "bytes_per_step", "bucket_bytes"}) during[me][n] = r.stat(n);
      r.step(kWarm, kLr);
      EXPECT_TRUE(r.wait_rounds(2));
      r.step(kWarm + 1, kLr);
      r.sync();
      end[me] = r.x;
      for (const char* n : {"async_rounds", "bytes_per_step", "async_round_bytes"}) after[me][n] = r.stat(n);
    });
    run_job("bagua", world, {}, [&](Rank& r) {
      for (int k = 0; k < kWarm; ++k) r.step(k, kLr);
      ga[static_cast<size_t>(r.rank())] = r.x;
    });
    const Weights want = allreduce_reference(world, kWarm);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(warm[r], ga[r]) << "W=" << world << " rank " << r;
      EXPECT_LE(max_abs_diff(warm[r], want), 1e-6) << "W=" << world << " rank " << r;
      EXPECT_EQ(during[r].at("async_rounds"), 0);
      EXPECT_EQ(during[r].at("bytes_per_step"), during[r].at("bucket_bytes"));
      EXPECT_EQ(during[r].at("bytes_per_step"), 4.0 * kParams);
      EXPECT_GE(after[r].at("async_rounds"), 2);
      EXPECT_EQ(after[r].at("bytes_per_step"), 0);
      EXPECT_EQ(after[r].at("async_round_bytes"), 4.0 * kParams + 4);  // the values and the stop flag
      EXPECT_EQ(end[r], end[0]) << "W=" << world << " rank " << r << " differs after sync_weights";
    }
  }
}

// With no round (sync_interval_ms of a day) each rank trains alone on its own batches; then
// sync_weights gives every rank the mean of their weights: at 2 ranks exactly (a + b) / 2.
TEST(Async, SyncWeightsIsTheMeanOfTheRanks) {
  constexpr int kSteps = 10;
  for (int world : {2, 3}) {
    std::vector<Weights> before(world), after(world);
    std::vector<std::map<std::string, double>> st(world);
    run_job("bagua_async", world, {{"sync_interval_ms", "86400000"}}, [&](Rank& r) {
      for (int k = 0; k < kSteps; ++k) r.step(k, kLr);
      const size_t me = static_cast<size_t>(r.rank());
      before[me] = r.x;  // the thread sleeps until an agreement: it touches nothing now
      r.sync();
      after[me] = r.x;
      for (const char* n : {"async_rounds", "async_syncs"}) st[me][n] = r.stat(n);
    });
    Weights mean(kParams, 0.0f);
    for (int r = 0; r < world; ++r) {
      EXPECT_LE(max_abs_diff(before[r], local_reference(r, kSteps)), 1e-6) << "W=" << world << " rank " << r;
      for (int i = 0; i < kParams; ++i) mean[i] += before[r][i];
    }
    for (float& v : mean) v /= static_cast<float>(world);
    EXPECT_GT(max_abs_diff(before[0], before[1]), 1e-3) << "the ranks trained alike: the test shows nothing";
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(after[r], after[0]) << "W=" << world << " rank " << r;
      EXPECT_EQ(st[r].at("async_rounds"), 0);
      EXPECT_EQ(st[r].at("async_syncs"), 1);
    }
    if (world == 2)
      EXPECT_EQ(after[0], mean);
    else
      EXPECT_LE(max_abs_diff(after[0], mean), 1e-6);
  }
}

// With the training paused (lr 0) a round is x <- x + (mean - x) on every rank, the mean over the
// ranks' snapshots: replayed exactly, round after round, from two different starting points.
TEST(Async, ARoundAddsTheMeanMinusTheSnapshot) {
  std::vector<Weights> start(2), seen(2);
  std::vector<int> rounds(2, -1);
  run_job("bagua_async", 2, {{"warmup_steps", "1"}, {"sync_interval_ms", "1"}}, [&](Rank& r) {
    const size_t me = static_cast<size_t>(r.rank());
    r.step(0, 0.0f);  // warmup: no thread yet, so the values are the test's to set
    for (int i = 0; i < kParams; ++i) r.x[i] += static_cast<float>(0.01 * (me + 1) * std::cos(2.1 * i + me));
    start[me] = r.x;
    const auto end = Clock::now() + std::chrono::seconds(10);
    for (int k = 1; rounds[me] < 3 && Clock::now() < end; ++k) {
      r.step(k, 0.0f, [&] {  // under the weights lock: the count and the values agree
        rounds[me] = static_cast<int>(r.stat("async_rounds"));
        seen[me] = r.x;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    r.sync();
  });
  ASSERT_GE(rounds[0], 3);
  ASSERT_GE(rounds[1], 3);
  // The reference: both ranks' values, round by round, in float32.
  std::vector<Weights> y = start;
  std::vector<std::vector<Weights>> after_round(2, {start[0]});
  after_round[1] = {start[1]};
  const int most = std::max(rounds[0], rounds[1]);
  for (int j = 0; j < most; ++j) {
    Weights m(kParams);
    for (int i = 0; i < kParams; ++i) m[i] = (y[0][i] + y[1][i]) / 2.0f;
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < kParams; ++i) y[r][i] = y[r][i] + (m[i] - y[r][i]);
      after_round[r].push_back(y[r]);
    }
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(seen[r], after_round[r][static_cast<size_t>(rounds[r])]) << "rank " << r << " after " << rounds[r];
    EXPECT_GT(max_abs_diff(seen[r], start[r]), 1e-3) << "rank " << r << " did not move";
  }
}

// Rounds move weights between the ranks but never change their mean: after training with rounds
// and a final sync_weights, every rank holds rank 0's start minus the mean over the ranks of what
// their optimizers applied.  A round that dropped the steps taken while it communicated (x = mean)
// or counted them twice would break this.
TEST(Async, RoundsKeepTheMeanOfTheRanks) {
  constexpr int kSteps = 100, kRounds = 20;
  for (int world : {2, 3}) {
    std::vector<Weights> end(world);
    std::vector<std::vector<double>> applied(world);
    std::vector<double> rounds(world);
    run_job("bagua_async", world, {{"sync_interval_ms", "1"}}, [&](Rank& r) {
      // At least kSteps steps and kRounds rounds (each rank's count reaches kRounds before any
      // rank's sync_weights can pause the others: the rounds are collective).
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      for (int k = 0; (k < kSteps || r.stat("async_rounds") < kRounds) && Clock::now() < deadline; ++k) {
        r.step(k, kLr);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      r.sync();
      const size_t me = static_cast<size_t>(r.rank());
      end[me] = r.x;
      applied[me] = r.applied;
      rounds[me] = r.stat("async_rounds");
    });
    const Weights x0 = initial(0);
    Weights want(kParams);
    for (int i = 0; i < kParams; ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += applied[r][i];
      want[i] = static_cast<float>(x0[i] - sum / world);
    }
    for (int r = 0; r < world; ++r) {
      EXPECT_GE(rounds[r], kRounds) << "W=" << world;
      EXPECT_EQ(end[r], end[0]) << "W=" << world << " rank " << r;
    }
    EXPECT_LE(max_abs_diff(end[0], want), 2e-5) << "W=" << world;
    EXPECT_GT(max_abs_diff(end[0], x0), 1e-2) << "W=" << world << ": it did not train";
  }
}

// sync_weights pauses the thread and the next step restarts it: four phases, each with rounds,
// each ending with every rank on the same weights.
TEST(Async, PausesAndRestarts) {
  constexpr int kPhases = 4;
  std::vector<std::vector<Weights>> at_sync(2);
  std::vector<std::vector<double>> rounds(2);
  std::vector<double> syncs(2);
  run_job("bagua_async", 2, {{"sync_interval_ms", "1"}}, [&](Rank& r) {
    const size_t me = static_cast<size_t>(r.rank());
    for (int p = 0; p < kPhases; ++p) {
      for (int k = 0; k < 3; ++k) r.step(p * 3 + k, kLr);
      EXPECT_TRUE(r.wait_rounds(rounds[me].empty() ? 1 : rounds[me].back() + 1));
      if (me == static_cast<size_t>(p % 2)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      r.sync();
      at_sync[me].push_back(r.x);  // paused: nothing moves until the next step
      rounds[me].push_back(r.stat("async_rounds"));
    }
    syncs[me] = r.stat("async_syncs");
  });
  for (int p = 0; p < kPhases; ++p) {
    ASSERT_EQ(at_sync[0].size(), static_cast<size_t>(kPhases));
    ASSERT_EQ(at_sync[1].size(), static_cast<size_t>(kPhases));
    EXPECT_EQ(at_sync[0][p], at_sync[1][p]) << "phase " << p;
    if (p > 0) {
      EXPECT_GT(rounds[0][p], rounds[0][p - 1]) << "no round after restart " << p;
    }
  }
  EXPECT_EQ(syncs[0], kPhases);
}

// Twenty jobs that start the thread and stop it, each bounded: half end with sync_weights (one rank
// 20 ms after the other), half tear down while the thread runs (every rank leaving at once: the
// agreement says leave, no error), some before the thread ever started.
TEST(Async, TwentyStartStopCyclesNeverHang) {
  const auto t0 = Clock::now();
  for (int cycle = 0; cycle < 20; ++cycle) {
    const auto c0 = Clock::now();
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    const Options opts = {{"sync_interval_ms", cycle % 4 == 1 ? "50" : "1"}};
    run_job("bagua_async", 2, opts, [&](Rank& r) {
      if (cycle % 5 == 4) return;  // torn down before any step
      for (int k = 0; k < 4; ++k) {
        r.step(k, kLr);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (cycle % 2 == 0) {  // one rank later than the other: its thread rounds on meanwhile, alone
        if (r.rank() == (cycle / 2) % 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        r.sync();
        return;
      }
      std::unique_lock<std::mutex> lock(m);  // both ranks done training: teardown while the thread runs
      ++arrived;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == 2; });
    });
    const double secs = std::chrono::duration<double>(Clock::now() - c0).count();
    EXPECT_LT(secs, 5.0) << "cycle " << cycle;
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 60.0);
}

// A rank that tears down while another still trains (it failed, say): the others' next step fails
// within about one interval, saying why, instead of training on alone.
TEST(Async, ARankThatLeavesFailsTheOthers) {
  std::string error;
  double took_ms = -1;
  const auto failures = strattest::run_ranks(2, "bagua-async-leave", [&](int rank, int port) {
    pl::Runtime rt(strattest::runtime_options("off"));
    pl::Store store(rt, strattest::store_client(port, "bagua-async-leave"));
    Rank r(rt, store.get(), rank, 2, "bagua_async", {{"sync_interval_ms", "20"}});
    r.setup();
    r.step(0, kLr);
    if (!r.wait_rounds(2)) throw std::runtime_error("no rounds");
    if (rank == 1) {
      r.s->teardown();
      return;
    }
    const auto t0 = Clock::now();
    try {
      for (int k = 1; Clock::now() - t0 < std::chrono::seconds(10); ++k) {
        r.step(k, kLr);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } catch (const pl::Error& e) {
      error = e.what();
      took_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    r.s->teardown();
  });
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
  EXPECT_THAT(error, HasSubstr("async's background model average stopped"));
  EXPECT_THAT(error, HasSubstr("another rank tore its strategy down"));
  EXPECT_GE(took_ms, 0);
  EXPECT_LT(took_ms, 5000);
}

// The loss scaler's verdict: agreed (the maximum) while warming up, each rank's own after (an
// agreement would make every 16-mixed step a rendezvous).
TEST(Async, SkipVerdictIsAgreedOnlyWhileWarmingUp) {
  std::vector<std::vector<bool>> skips(2);
  run_job("bagua_async", 2, {{"warmup_steps", "1"}, {"sync_interval_ms", "5"}}, [&](Rank& r) {
    const bool found_inf = r.rank() == 0;
    auto& out = skips[static_cast<size_t>(r.rank())];
    r.step(0, kLr);
    out.push_back(r.s->agree_skip(found_inf));  // step 0's boundary: still warming up
    r.step(1, kLr);
    out.push_back(r.s->agree_skip(found_inf));
    r.sync();
  });
  EXPECT_EQ(skips[0], (std::vector<bool>{true, true}));
  EXPECT_EQ(skips[1], (std::vector<bool>{true, false}));
}

// One rank: nothing to average; the steps are plain local SGD and sync_weights does nothing.
TEST(Async, OneRankTrainsLocally) {
  Weights x;
  double rounds = -1;
  run_job("bagua_async", 1, {{"sync_interval_ms", "1"}}, [&](Rank& r) {
    for (int k = 0; k < 5; ++k) r.step(k, kLr);
    r.sync();
    x = r.x;
    rounds = r.stat("async_rounds");
  });
  EXPECT_EQ(x, local_reference(0, 5));
  EXPECT_EQ(rounds, 0);
}

TEST(Async, SyncWeightsBeforeSetupOrInsideAStepIsAnError) {
  pl::Runtime rt(strattest::runtime_options("off"));
  Rank r(rt, nullptr, 0, 1, "bagua_async", {});
  auto e = strattest::error_of([&] { r.sync(); });
  EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), HasSubstr("sync_weights was called before setup"));
  r.setup();
  std::string inside;
  r.step(0, kLr, [&] { inside = strattest::error_of([&] { r.sync(); }).what(); });
  EXPECT_THAT(inside, HasSubstr("sync_weights was called inside run_step"));
  r.sync();  // between steps: fine
  r.s->teardown();
}

TEST(Async, BadOptionsNameTheValueAndWhatIsValid) {
  pl::Runtime rt(strattest::runtime_options("off"));
  struct Case {
    Options opts;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {{{"sync_interval_ms", "0"}}, {"sync_interval_ms='0'", ">= 1"}},
      {{{"sync_interval_ms", "-5"}}, {"sync_interval_ms='-5'", ">= 1"}},
      {{{"sync_interval_ms", "soon"}}, {"sync_interval_ms='soon'", "integer"}},
      {{{"sync_interval_ms", "86400001"}}, {"sync_interval_ms='86400001'", "from 1 to 86400000"}},
      {{{"warmup_steps", "-1"}}, {"warmup_steps='-1'", ">= 0"}},
      {{{"warmup_steps", "1.5"}}, {"warmup_steps='1.5'", "integer"}},
      {{{"algorithm", "bytegrad"}, {"sync_interval_ms", "5"}}, {"sync_interval_ms='5'", "applies to async"}},
  };
  for (const auto& c : cases) {
    auto e = strattest::error_of([&] { Rank r(rt, nullptr, 0, 1, "bagua_async", c.opts); });
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << e.what();
    for (const auto& w : c.want) EXPECT_THAT(e.what(), HasSubstr(w));
  }
  // algorithm=async through the plain name, and the stats' names
  Rank r(rt, nullptr, 0, 1, "bagua", {{"algorithm", "async"}, {"sync_interval_ms", "86400000"}});
  r.setup();
  for (const char* n : {"async_rounds", "async_comm_ms", "async_round_bytes", "async_syncs"}) EXPECT_EQ(r.stat(n), 0);
  r.s->teardown();
}

}  // namespace
