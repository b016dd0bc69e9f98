// Seeding, as Lightning's seed_everything: one seed makes a run reproducible.  The global
// generator (parameter initialisation, shuffling) is the same on every rank; rank_generator() is
// derived from (seed, rank) so that data augmentation differs between ranks yet is reproducible.
//
// Generators are not thread-safe: the global and rank generators belong to the thread that trains
// (the seed bookkeeping itself is locked).
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
  // Draws are computed from next_u64() by fixed formulas (not std::*_distribution, whose results
  // differ between standard libraries), so a seed gives the same numbers everywhere.
  double uniform(double lo = 0.0, double hi = 1.0);       // [lo, hi); lo == hi gives lo; lo > hi throws
  double normal(double mean = 0.0, double stddev = 1.0);  // Box-Muller; stddev < 0 throws
  int64_t randint(int64_t lo, int64_t hi);                // [lo, hi), unbiased; hi <= lo throws
  // The full state as text (the engine's operator<<), and back (checkpoints).  A bad text throws
  // pl::Error and leaves the generator unchanged.
  std::string state() const;
  void set_state(const std::string& text);

 private:
  std::mt19937_64 engine_;
};

// Seeds the global generator with `seed` and the rank generator with derive_seed(seed, rank + 1);
// returns the seed.  Also exported as PL_GLOBAL_SEED (setenv) for child processes.
uint64_t seed_everything(uint64_t seed);
// Whether a seed is known: given to seed_everything, or (read lazily, once, by any function here)
// PL_GLOBAL_SEED from the environment, which then seeds the generators as seed_everything would.
// A PL_GLOBAL_SEED that is not a decimal uint64 throws pl::Error naming it.
bool has_seed();
uint64_t current_seed();  // throws pl::Error when !has_seed()
Generator& global_generator();
// Per-rank generator: derived from (seed, rank) whenever either changes (seed 0 before any seed).
Generator& rank_generator();
// Called by the trainer once the process knows its rank (re-derives rank_generator); rank >= 0.
void set_seed_rank(int rank);
// SplitMix64-style mix of (seed, stream): independent streams from one seed.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

}  // namespace pl
