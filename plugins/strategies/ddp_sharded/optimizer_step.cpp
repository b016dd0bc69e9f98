// optimizer_step: the host's optimizer updates this rank's shard (its owned ranges: the elements
// whose averaged gradient it received and whose optimizer state it keeps), then every bucket's
// updated values are allgathered, so that every rank holds all parameters again before the next
// forward.  The allgathers run in bucket order on the gradient group (its collectives are all
// complete once after_backward returned), through the buckets' flat buffers (a bucket of one
// parameter: in the parameter itself, GatherPlan::direct): with stage 2's two shared buffers, a
// bucket's allgather completes and is unpacked before the next bucket using its buffer
// (Bucket::slot_prev) packs into it.  Every wait is bounded; a failure aborts the group, leaving nothing in flight.
#include <chrono>
#include <utility>

#include "reducer.hpp"
#include "sharded_strategy.hpp"

namespace plrt::ddp_sharded {

using plugin::fail;
using strategy::check;

namespace {

// As the reducer's waits: the group's timeout and its diagnosis, plus a margin.
constexpr int64_t kWaitGraceMs = 5000;

void gather_parameters(ShardedStrategy& s) {
  ddp::DdpStrategy& d = *s.core;
  std::vector<reducer::Bucket>& buckets = d.grads->buckets();
  const size_t n = buckets.size();
  std::vector<PL_Work*> works(n, nullptr);
  auto complete = [&](size_t b) {
    GatherPlan& g = s.gathers[b];
    if (works[b] == nullptr) return;  // completed already
    d.group.wait(std::exchange(works[b], nullptr), d.group.timeout_ms() + kWaitGraceMs, g.what);
    if (!g.direct) reducer::unpack_parts(d.dev, buckets[b].flat, g.offsets, g.values, g.what_unpack);
  };
  try {
    for (size_t b = 0; b < n; ++b) {
      GatherPlan& g = s.gathers[b];
      // a shared buffer: the bucket that used it before must be unpacked first
      if (!g.direct && buckets[b].slot_prev >= 0) complete(static_cast<size_t>(buckets[b].slot_prev));
      if (!g.direct) reducer::pack_parts(d.dev, g.own, g.own_offsets, buckets[b].flat, g.what_pack);
      PL_Tensor& mine = g.outputs[static_cast<size_t>(s.rank)];  // in place: the input is our own chunk
      check(s.host, d.group.api()->allgather(d.group.get(), &mine, g.outputs.data(), g.outputs.size(), &works[b]),
            g.what);
      if (works[b] == nullptr) fail(PL_ERR_INTERNAL, g.what + ": the process group returned no work handle");
    }
    for (size_t b = 0; b < n; ++b) complete(b);
  } catch (...) {
    bool outstanding = false;
    for (PL_Work* w : works) outstanding = outstanding || w != nullptr;
    if (outstanding) d.group.abort();  // the rest fail at once instead of being waited for
    for (PL_Work*& w : works)
      if (w != nullptr) d.group.api()->work_destroy(std::exchange(w, nullptr));
    throw;
  }
}

}  // namespace

void optimizer_step(ShardedStrategy& s, const PL_OptimizerFn* fn) {
  if (fn == nullptr || fn->struct_size < PL_STRUCT_SIZE(PL_OptimizerFn, step) || fn->step == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": optimizer_step needs a PL_OptimizerFn with `step` set");
  std::lock_guard<std::mutex> lock(s.core->m);
  if (!s.core->set_up) fail(PL_ERR_INVALID_ARGUMENT, s.who + ": optimizer_step was called before setup");
  check(s.host, fn->step(fn->user, s.owned.data(), s.owned.size()), s.who + ": optimizer_step");
  ++s.stats.optimizer_steps;
  if (!s.core->group) return;
  const auto t0 = std::chrono::steady_clock::now();
  gather_parameters(s);
  s.stats.allgather_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace plrt::ddp_sharded
