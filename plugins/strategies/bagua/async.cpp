// async (docs/bagua.md §5): asynchronous model average.  The first warmup_steps optimizer steps run
// as gradient_allreduce (the buckets' mean); from the first step after that, a background thread
// averages the weights every sync_interval_ms while each rank trains at its own pace.
//
// THE LOCK.  `weights_` is held by the training step during forward and backward (run_step) and
// during the optimizer step (the host's optimizer writes the weights there), and by the thread
// while it reads the weights (the snapshot) and while it writes them (the update).  The
// allreduce itself runs without it, so training goes on while a round communicates.
//
// GRADIENTS.  While warming up the buckets are allreduced (the mean); from the first step after
// warmup the reducer's grad sync is turned off, so the gradients stay local without a copy.
//
// A ROUND, on the thread's own process group (made at setup, "<core group>.bagua_async.<n>"):
//   1. wait sync_interval_ms (at once when this rank asks to stop);
//   2. agreement: allreduce MAX of this rank's wish (0 go on, 1 pause: sync_weights, 2 leave:
//      teardown); a nonzero result ends the thread on every rank at the same round;
//   3. under the lock: snapshot S = the trainable values (packed, bucket by bucket);
//   4. without it: M = allreduce AVG of S, then D = M - S;
//   5. under the lock: x += D (x has moved on by the steps taken meanwhile; they are kept).
// Every rank runs the same sequence of collectives on that group (each round begins with the
// agreement), so the ranks' rounds pair up whatever their speeds: a round is a rendezvous.
// Hierarchical (hierarchy.hpp): the thread's groups are a hierarchy of their own instead (each
// node's ranks, the leaders), and every allreduce of the round runs through them: inside the node,
// among the leaders, back to the node.
//
// BUFFERS (running statistics) are broadcast from rank 0 before every warmup step, as ddp does, but
// not after warmup (a broadcast per step would make every step a rendezvous): each rank keeps its
// own until sync_weights, which gives every rank rank 0's.
//
// STOPPING.  A thread stopped by an agreement is not restarted until this rank has averaged the
// weights synchronously (sync_weights: its peers do so next on that group).  Pausing (1) makes the
// other ranks' threads stop quietly; they train on alone until they reach the same sync_weights.
// Leaving (2, a teardown while the thread runs: an error on that rank, or a host that never calls
// sync_weights) is an error on the ranks that are still training: their next step fails, saying
// so.  A rank that dies breaks the group's connections: the round in flight fails at once on every
// other rank, and their next step fails with the group's message.  Every wait is bounded: a
// collective by the group's timeout, a stop by that timeout plus one interval (then the group is
// aborted).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "algorithm.hpp"
#include "bagua_strategy.hpp"
#include "reducer.hpp"

namespace plrt::bagua {

using plugin::fail;
using strategy::check;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kGo = 0, kPause = 1, kLeave = 2;  // a rank's wish in the agreement
constexpr int64_t kTeardownWaitMs = 10000;      // as ddp's teardown: a peer in the same round is far quicker
constexpr int64_t kGraceMs = 2000;              // a collective's own timeout fires first

// One gradient bucket's trainable values, packed: the snapshot and the mean.
struct Flat {
  strategy::DeviceMemory snap_mem, mean_mem;
  PL_Tensor snap{}, mean{};
  std::vector<PL_Tensor> parts;  // the members' values
  std::vector<int64_t> offsets;  // element offsets in the flat buffers
  std::string what;              // "bucket 1 of 2 (...)"
};

class Async final : public Algorithm {
 public:
  Async(const BaguaOptions& o) : interval_ms_(o.sync_interval_ms), warmup_steps_(o.warmup_steps) {}
  ~Async() override { join(); }
  // After warmup each rank steps its own gradients: its optimizer state is its own (checkpoints).
  bool local_optimizer_state() const override { return true; }

  // The warmup's gradient mean.  After warmup the reducer's grad sync is off (run_step): the
  // gradients stay local, not even packed.
  std::unique_ptr<reducer::BucketComm> bucket_comm() override {
    return std::make_unique<reducer::Allreduce>(PL_REDUCE_AVG);
  }

  void setup(BaguaStrategy& s) override {
    ddp::DdpStrategy& c = *s.core;
    std::lock_guard<std::mutex> lock(m_);
    failed_ = false;
    error_.clear();
    wish_ = kGo;
    may_start_ = true;
    dirty_ = false;
    if (!c.group) return;  // one rank: nothing to average
    strategy::GroupSpec spec = c.group_spec;
    spec.name += ".bagua_async." + std::to_string(setups_++);
    spec.needs = {"allreduce"};
    flats_.clear();
    round_bytes_ = 4;  // the agreement's flag
    for (const reducer::Bucket& b : c.grads->buckets()) {
      Flat f;
      f.what = c.grads->describe(b);
      f.snap_mem = strategy::DeviceMemory(c.dev, b.plan.bytes, s.who + ": async's snapshot of " + f.what);
      f.mean_mem = strategy::DeviceMemory(c.dev, b.plan.bytes, s.who + ": async's mean of " + f.what);
      f.snap = reducer::flat_view(f.snap_mem.get(), b.plan, c.dev.device);
      f.mean = reducer::flat_view(f.mean_mem.get(), b.plan, c.dev.device);
      for (size_t i : b.plan.members) f.parts.push_back(c.params[i].value);
      f.offsets = b.offsets;
      round_bytes_ += b.plan.bytes;
      flats_.push_back(std::move(f));
    }
    reducer::PlannedBucket one;
    one.dtype = PL_F32;
    one.bytes = 4;
    flag_mem_ = strategy::DeviceMemory(c.dev, 4, s.who + ": async's agreement flag");
    flag_ = reducer::flat_view(flag_mem_.get(), one, c.dev.device);
    if (s.hier) {
      hier_.plan(s.hier.layout());
      hier_.connect(s.host, spec, "", {}, c.dev);  // the instance's setup checked the node sizes
    } else {
      group_ = strategy::Group(s.host, spec);
    }
    // Every rank connected before any goes on: a rank tearing down right after setup would
    // otherwise destroy the group under a peer still connecting to it.
    agree(s, kGo, s.who + ": async's setup (every rank connected to its group)");
  }

  void run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn) override {
    throw_error(s);
    const bool warming = s.optimizer_steps < warmup_steps_;
    warming_ = warming;
    if (!warming && s.core->grads->grad_sync()) ddp::set_grad_sync(*s.core, false);  // between steps: allowed
    if (!warming && connected()) start_thread(s);
    std::lock_guard<std::mutex> w(weights_);
    in_step_ = true;
    dirty_ = true;
    try {
      ddp::run_step(*s.core, fn, warming);  // after warmup no buffer broadcast: no rendezvous per step
    } catch (...) {
      in_step_ = false;
      throw;
    }
    in_step_ = false;
  }

  // After warmup each rank's step is its own: so is the loss scaler's verdict (agreeing would make
  // every 16-mixed step a rendezvous).
  bool agree_skip(BaguaStrategy& s, bool found_inf) override {
    return warming_ ? Algorithm::agree_skip(s, found_inf) : found_inf;
  }

  void optimizer_step(BaguaStrategy& s, const PL_OptimizerFn* fn) override {
    throw_error(s);
    std::lock_guard<std::mutex> w(weights_);
    ddp::optimizer_step(*s.core, fn);
  }

  void sync_weights(BaguaStrategy& s) override {
    {
      std::lock_guard<std::mutex> lock(s.core->m);
      if (!s.core->set_up) fail(PL_ERR_INVALID_ARGUMENT, s.who + ": sync_weights was called before setup");
    }
    if (in_step_)
      fail(PL_ERR_INVALID_ARGUMENT, s.who +
                                        ": sync_weights was called inside run_step; call it between steps (after "
                                        "after_optimizer_step), on every rank at the same point");
    throw_error(s);
    if (!connected()) return;
    stop_thread(s, kPause, s.core->timeout_ms);
    throw_error(s);
    if (dirty_) {  // every rank has run the same steps since the last one
      average_now(s);
      ddp::broadcast_buffers(*s.core);  // rank 0's buffers, as ddp's step would give them
    }
    dirty_ = false;
    std::lock_guard<std::mutex> lock(m_);
    may_start_ = true;
  }

  void teardown(BaguaStrategy& s) noexcept override {
    try {
      stop_thread(s, kLeave, std::min(s.core->timeout_ms, kTeardownWaitMs));
    } catch (const std::exception& e) {
      plugin::logf(s.host, PL_LOG_WARN, s.who.c_str(), "teardown: stopping async's thread: %s", e.what());
    }
    join();
    flats_.clear();
    flag_mem_.reset();
    group_.reset();
    hier_.disconnect();
  }

  // A step while warming up communicates the gradient buckets; after warmup a step communicates
  // nothing (the rounds do: async_round_bytes each).
  double bytes_per_step(const BaguaStrategy& s) const override { return warming_ ? Algorithm::bytes_per_step(s) : 0.0; }

  void add_stats(const BaguaStrategy& s, StatList& out) const override {
    (void)s;
    out.emplace_back("async_rounds", static_cast<double>(rounds_.load()));
    out.emplace_back("async_comm_ms", static_cast<double>(comm_us_.load()) / 1000.0);
    out.emplace_back("async_round_bytes", static_cast<double>(round_bytes_));
    out.emplace_back("async_syncs", static_cast<double>(syncs_.load()));
  }

 private:
  // The thread's error, once it has one (it stays: every later step fails with it).
  void throw_error(const BaguaStrategy& s) {
    std::lock_guard<std::mutex> lock(m_);
    if (failed_) fail(error_code_, s.who + ": async's background model average stopped: " + error_);
  }

  void start_thread(BaguaStrategy& s) {
    std::unique_lock<std::mutex> lock(m_);
    if (running_ || !may_start_ || failed_) return;
    lock.unlock();
    join();  // the previous round of the thread has ended
    lock.lock();
    wish_ = kGo;
    running_ = true;
    thread_ = std::thread([this, &s] { loop(s); });
    plugin::logf(s.host, PL_LOG_DEBUG, s.who.c_str(), "async: the averaging thread starts (every %lld ms)",
                 static_cast<long long>(interval_ms_));
  }

  // Asks the thread to stop with `wish` and waits for the agreement (bounded by wait_ms plus an
  // interval; past it the group is aborted, which fails the collective in flight).
  void stop_thread(BaguaStrategy& s, int wish, int64_t wait_ms) {
    std::unique_lock<std::mutex> lock(m_);
    if (!running_) return;
    wish_ = wish;
    cv_.notify_all();
    const auto bound = std::chrono::milliseconds(wait_ms + interval_ms_ + kGraceMs);
    if (!cv_.wait_for(lock, bound, [&] { return !running_; })) {
      lock.unlock();
      if (group_) group_.abort();
      hier_.abort();
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(kTeardownWaitMs), [&] { return !running_; });
      if (running_) {  // never seen: an aborted group fails its collectives at once
        lock.unlock();
        fail(PL_ERR_INTERNAL, s.who + ": async's thread did not stop after its group was aborted");
      }
      if (!failed_) {
        failed_ = true;
        error_code_ = PL_ERR_TIMEOUT;
        error_ = "the ranks did not agree to stop within " + std::to_string(bound.count()) + " ms";
      }
    }
  }

  void join() {
    if (thread_.joinable()) thread_.join();
  }

  void loop(BaguaStrategy& s) {
    const strategy::DeviceContext& dev = s.core->dev;
    int agreed = kGo, wish = kGo;
    try {
      if (dev.device.type != PL_DEVICE_CPU && dev.api->set_device != nullptr)
        check(s.host, dev.api->set_device(dev.acc, dev.device.index), s.who + ": async's thread binding its device");
      for (uint64_t round = 0;; ++round) {
        {
          std::unique_lock<std::mutex> lock(m_);
          cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [&] { return wish_ != kGo; });
          wish = wish_;
        }
        agreed = agree(s, wish, s.who + ": async's agreement before round " + std::to_string(round));
        if (agreed != kGo) break;
        average_round(s, round);
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(m_);
      const auto* f = dynamic_cast<const plugin::Failure*>(&e);
      failed_ = true;
      error_code_ = f != nullptr ? f->code : PL_ERR_INTERNAL;
      error_ = e.what();
      running_ = false;
      may_start_ = false;
      cv_.notify_all();
      plugin::logf(s.host, PL_LOG_WARN, s.who.c_str(), "async: the averaging thread failed: %s", e.what());
      return;
    }
    std::lock_guard<std::mutex> lock(m_);
    if (agreed == kLeave && wish != kLeave) {
      failed_ = true;
      error_code_ = PL_ERR_RUNTIME;
      error_ =
          "another rank tore its strategy down (it failed, or ended training without sync_weights) while "
          "this rank was still training";
    }
    running_ = false;
    may_start_ = false;  // the peers average synchronously before any new round
    cv_.notify_all();
  }

  // The maximum of the ranks' wishes.
  int agree(BaguaStrategy& s, int wish, const std::string& what) {
    const strategy::DeviceContext& dev = s.core->dev;
    const PL_Device host{PL_DEVICE_CPU, 0};
    float v = static_cast<float>(wish);
    dev.copy(flag_.data, dev.device, &v, host, 4, what);
    const auto t0 = Clock::now();
    all_reduce(flag_, PL_REDUCE_MAX, what);
    add_comm(t0);
    dev.copy(&v, host, flag_.data, dev.device, 4, what);
    return static_cast<int>(v);
  }

  void average_round(BaguaStrategy& s, uint64_t round) {
    const strategy::DeviceContext& dev = s.core->dev;
    const std::string what = s.who + ": async's round " + std::to_string(round);
    {
      std::lock_guard<std::mutex> w(weights_);
      for (Flat& f : flats_) reducer::pack_parts(dev, f.parts, f.offsets, f.snap, what + ": snapshot of " + f.what);
      synchronize(s, what);
    }
    for (Flat& f : flats_) {
      const std::string fw = what + ": average of " + f.what;
      dev.copy(f.mean.data, dev.device, f.snap.data, dev.device, bytes(f.snap), fw);
      const auto t0 = Clock::now();
      all_reduce(f.mean, PL_REDUCE_AVG, fw);
      add_comm(t0);
      check(s.host, dev.api->axpy(dev.acc, &f.mean, -1.0, &f.snap, nullptr), fw + " (mean - snapshot)");
    }
    std::lock_guard<std::mutex> w(weights_);
    for (Flat& f : flats_) {  // x += mean - snapshot, through the snapshot's buffer
      const std::string fw = what + ": update of " + f.what;
      reducer::pack_parts(dev, f.parts, f.offsets, f.snap, fw);
      check(s.host, dev.api->axpy(dev.acc, &f.snap, 1.0, &f.mean, nullptr), fw);
      reducer::unpack_parts(dev, f.snap, f.offsets, f.parts, fw);
    }
    synchronize(s, what);
    rounds_.fetch_add(1);
  }

  // The synchronous average (sync_weights; the thread is stopped): x = mean over the ranks of x.
  void average_now(BaguaStrategy& s) {
    const strategy::DeviceContext& dev = s.core->dev;
    for (Flat& f : flats_) {
      const std::string what = s.who + ": sync_weights: the average of " + f.what;
      reducer::pack_parts(dev, f.parts, f.offsets, f.snap, what);
      all_reduce(f.snap, PL_REDUCE_AVG, what);
      reducer::unpack_parts(dev, f.snap, f.offsets, f.parts, what);
    }
    synchronize(s, s.who + ": sync_weights");
    syncs_.fetch_add(1);
  }

  // The thread's groups exist (from setup until teardown; none with one rank).
  bool connected() const { return static_cast<bool>(group_) || hier_.connected(); }
  // t = op over every rank's t, on the thread's group or through its hierarchy.
  void all_reduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const {
    if (hier_.connected())
      hier_.allreduce(t, op, what);
    else
      group_.allreduce(t, op, what);
  }

  // The accelerator's queued work is done (cuda's kernels are asynchronous): the lock covers it.
  static void synchronize(const BaguaStrategy& s, const std::string& what) {
    const strategy::DeviceContext& dev = s.core->dev;
    if (dev.api->stream_synchronize != nullptr) check(s.host, dev.api->stream_synchronize(dev.acc, nullptr), what);
  }
  static size_t bytes(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }
  void add_comm(Clock::time_point t0) {
    comm_us_.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  }

  const int64_t interval_ms_, warmup_steps_;
  std::atomic<bool> warming_{true};

  std::mutex weights_;  // the weights lock (see the top of the file)
  std::atomic<bool> in_step_{false};
  bool dirty_ = false;  // a step ran since the last synchronous average (the host's thread only)

  // The thread's control, under m_.
  std::mutex m_;
  std::condition_variable cv_;
  int wish_ = kGo;
  bool running_ = false;
  bool may_start_ = true;
  bool failed_ = false;  // error_ (and error_code_) say why
  std::string error_;
  PL_ErrorCode error_code_ = PL_ERR_RUNTIME;
  std::thread thread_;

  // From setup until teardown (the thread reads them while it runs).
  strategy::Group group_;  // flat
  Hierarchy hier_;         // hierarchical (planned at setup)
  std::vector<Flat> flats_;
  strategy::DeviceMemory flag_mem_;
  PL_Tensor flag_{};
  size_t round_bytes_ = 0;
  int setups_ = 0;

  std::atomic<uint64_t> rounds_{0}, syncs_{0};
  std::atomic<int64_t> comm_us_{0};
};

}  // namespace

std::unique_ptr<Algorithm> make_async(const BaguaOptions& opts, const PL_StrategyConfig& config, const Scope& scope) {
  (void)config;
  (void)scope;  // its own groups: a hierarchy like the instance's (setup)
  return std::make_unique<Async>(opts);
}

}  // namespace plrt::bagua
