#include "weight_algorithm.hpp"

#include <cstring>

#include "bagua_strategy.hpp"

namespace plrt::bagua {

void WeightAlgorithm::setup(BaguaStrategy& s) {
  steps_ = exchanges_ = 0;
  comm_ms_ = bytes_ = 0;
  pending_ = PendingValues();
  make_buffers(s);
}

void WeightAlgorithm::run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn) {
  if (pending_.pending()) pending_.apply(*s.core);  // this rank's own values, after the host's load
  Algorithm::run_step(s, fn);
}

void WeightAlgorithm::teardown(BaguaStrategy& s) noexcept {
  (void)s;
  free_buffers();
  pending_ = PendingValues();
}

void WeightAlgorithm::save_state(BaguaStrategy& s, const std::string& dir) {
  require_setup(*s.core, "save_state");
  RankState st;
  st.algorithm = name_;
  st.rank = rank_;
  st.world = world_;
  std::vector<uint8_t> counters(2 * sizeof(int64_t));
  std::memcpy(counters.data(), &steps_, sizeof steps_);
  std::memcpy(counters.data() + sizeof steps_, &exchanges_, sizeof exchanges_);
  st.add("counters", PL_I64, std::move(counters));
  pending_.save(*s.core, st);
  save_extra(*s.core, st);
  write_state(s.who, state_path(dir, rank_), st);
}

void WeightAlgorithm::load_state(BaguaStrategy& s, const std::string& dir, int32_t saved_world) {
  require_setup(*s.core, "load_state");
  check_saved_world(s.who, saved_world, world_);
  const std::string file = state_path(dir, rank_);
  const RankState st = read_state(s.who, file, name_, rank_, world_);
  const StateEntry& counters = st.get(s.who, file, "counters", PL_I64, 2 * sizeof(int64_t));
  PendingValues values;
  values.load(*s.core, st, file);
  const std::function<void()> extra = load_extra(*s.core, st, file);
  // Every check passed: the changes.
  if (extra) extra();
  std::memcpy(&steps_, counters.bytes.data(), sizeof steps_);
  std::memcpy(&exchanges_, counters.bytes.data() + sizeof steps_, sizeof exchanges_);
  pending_ = std::move(values);
}

double WeightAlgorithm::bytes_per_step(const BaguaStrategy& s) const {
  (void)s;
  return bytes_;
}

void WeightAlgorithm::add_stats(const BaguaStrategy& s, StatList& out) const {
  (void)s;
  out.emplace_back("exchanges", static_cast<double>(exchanges_));
  out.emplace_back("weight_comm_ms", comm_ms_);
}

}  // namespace plrt::bagua
