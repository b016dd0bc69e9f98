// pl::Generator draws and the process-wide seed (seed_everything, PL_GLOBAL_SEED).
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/random.hpp>
#include <sstream>
#include <system_error>

#include "sdk_internal.hpp"

namespace pl {

namespace {

using plrt::sdk::num;

constexpr double kPi = 3.14159265358979323846;

// 53 random bits as a double in [0, 1).
double unit(Generator& g) { return static_cast<double>(g.next_u64() >> 11) * 0x1p-53; }

uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The process-wide seed.  The generators live outside the lock (see random.hpp), their seeding
// happens under it.
struct SeedState {
  std::mutex mu;
  bool seeded = false;
  bool env_checked = false;
  uint64_t seed = 0;
  int rank = 0;
  Generator global;
  Generator rank_gen{derive_seed(0, 1)};
};

SeedState& seed_state() {
  static SeedState s;
  return s;
}

void apply_seed(SeedState& s, uint64_t seed) {
  s.seed = seed;
  s.seeded = true;
  s.global.seed(seed);
  s.rank_gen.seed(derive_seed(seed, static_cast<uint64_t>(s.rank) + 1));
}

// Adopts PL_GLOBAL_SEED once, when no seed was given in this process.
void adopt_env_seed(SeedState& s) {
  if (s.seeded || s.env_checked) return;
  const char* text = std::getenv("PL_GLOBAL_SEED");
  if (text == nullptr) {
    s.env_checked = true;
    return;
  }
  const std::string t = text;
  uint64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size())
    throw Error(PL_ERR_INVALID_ARGUMENT, "PL_GLOBAL_SEED '" + t +
                                             "' (from the environment) is not a seed; it must be "
                                             "a decimal integer in [0, 18446744073709551615]");
  s.env_checked = true;
  apply_seed(s, v);
}

}  // namespace

double Generator::uniform(double lo, double hi) {
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi))
    throw Error(PL_ERR_INVALID_ARGUMENT, "Generator::uniform: the range [" + num(lo) + ", " + num(hi) +
                                             ") is invalid; lo and hi must be finite with lo <= hi");
  if (lo == hi) return lo;
  const double r = lo + (hi - lo) * unit(*this);
  return r < hi ? r : std::nextafter(hi, lo);  // (hi - lo) * u can round up to hi
}

double Generator::normal(double mean, double stddev) {
  if (!(stddev >= 0) || !std::isfinite(stddev) || !std::isfinite(mean))
    throw Error(PL_ERR_INVALID_ARGUMENT, "Generator::normal: mean " + num(mean) + ", stddev " + num(stddev) +
                                             " is invalid; both must be finite with stddev >= 0");
  // Box-Muller, the first of the pair (the second is dropped: no hidden state to checkpoint).
  const double u1 = 1.0 - unit(*this);  // (0, 1]: log(u1) is finite
  const double u2 = unit(*this);
  return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

int64_t Generator::randint(int64_t lo, int64_t hi) {
  if (hi <= lo)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Generator::randint: the range [" + std::to_string(lo) + ", " +
                                             std::to_string(hi) + ") is empty; hi must exceed lo");
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  // Rejection of the top partial block keeps every value equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t v;
  do {
    v = next_u64();
  } while (v >= limit);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + v % span);
}

std::string Generator::state() const {
  std::ostringstream os;
  os << engine_;
  return os.str();
}

void Generator::set_state(const std::string& text) {
  std::istringstream is(text);
  std::mt19937_64 e;
  is >> e;
  if (is.fail() || !(is >> std::ws).eof()) {
    const std::string head = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    throw Error(PL_ERR_INVALID_ARGUMENT, "Generator::set_state: '" + head +
                                             "' is not a generator state (expected the text of Generator::state(): "
                                             "312 words and a position)");
  }
  engine_ = e;
}

uint64_t seed_everything(uint64_t seed) {
  SeedState& s = seed_state();
  std::lock_guard<std::mutex> lock(s.mu);
  apply_seed(s, seed);
  s.env_checked = true;  // the given seed wins over the environment's
  const std::string text = std::to_string(seed);
  if (::setenv("PL_GLOBAL_SEED", text.c_str(), 1) != 0)
    throw Error(PL_ERR_RUNTIME, "seed_everything: cannot export PL_GLOBAL_SEED=" + text);
  return seed;
}

bool has_seed() {
  SeedState& s = seed_state();
  std::lock_guard<std::mutex> lock(s.mu);
  adopt_env_seed(s);
  return s.seeded;
}

uint64_t current_seed() {
  SeedState& s = seed_state();
  std::lock_guard<std::mutex> lock(s.mu);
  adopt_env_seed(s);
  if (!s.seeded)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "current_seed: no seed was set; call pl::seed_everything(seed) or set "
                "PL_GLOBAL_SEED (check with pl::has_seed())");
  return s.seed;
}

Generator& global_generator() {
  SeedState& s = seed_state();
  std::lock_guard<std::mutex> lock(s.mu);
  adopt_env_seed(s);
  return s.global;
}

Generator& rank_generator() {
  SeedState& s = seed_state();
  std::lock_guard<std::mutex> lock(s.mu);
  adopt_env_seed(s);
  return s.rank_gen;
}

void set_seed_rank(int rank) {
  if (rank < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "set_seed_rank: rank " + std::to_string(rank) + " is invalid; it must be >= 0");
  SeedState& s = seed_state();
  std::lock_guard<std::mutex> lock(s.mu);
  adopt_env_seed(s);
  s.rank = rank;
  s.rank_gen.seed(derive_seed(s.seed, static_cast<uint64_t>(rank) + 1));
}

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  // The seed is mixed before the stream's golden-ratio step is added: with seed + stream * step
  // alone, (s, k) and (s + step, k - 1) would give the same stream.
  return splitmix64(splitmix64(seed) + (stream + 1) * 0x9E3779B97F4A7C15ull);
}

}  // namespace pl
