// Seeding, as Lightning's seed_everything: one seed makes a run reproducible.  The global
// generator (parameter initialisation, shuffling) is the same on every rank; rank_generator() is
// derived from (seed, rank) so that data augmentation differs between ranks yet is reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace pl {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void seed(uint64_t s) { engine_.seed(s); }
  uint64_t next_u64() { return engine_(); }
  double uniform(double lo = 0.0, double hi = 1.0);  // [lo, hi)
  double normal(double mean = 0.0, double stddev = 1.0);
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi)
  // The full state as text, and back (checkpoints).  A bad text throws pl::Error.
  std::string state() const;
  void set_state(const std::string& text);

 private:
  std::mt19937_64 engine_;
};

// Seeds the global generator with `seed` and the rank generator with a value derived from
// (seed, rank); returns the seed.  Also exported as PL_GLOBAL_SEED for child processes.
uint64_t seed_everything(uint64_t seed);
// The seed given to seed_everything (or PL_GLOBAL_SEED from the environment); nullopt-like -1
// as "never seeded" is reported by has_seed().
bool has_seed();
uint64_t current_seed();
Generator& global_generator();
// Per-rank generator: derived from (seed, rank) whenever either changes.
Generator& rank_generator();
// Called by the trainer once the process knows its rank (re-derives rank_generator).
void set_seed_rank(int rank);
// SplitMix64-style mix of (seed, stream): independent streams from one seed.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

}  // namespace pl
