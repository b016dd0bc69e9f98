// The pieces pl::ClusterEnv::detect's readers share (cluster_env.cpp: plrun, torchrun, SLURM;
// cluster_env_mpi.cpp: Open MPI, horovodrun): reading a variable, checking it, and the error
// messages that name it, its value and what is valid.
#pragma once

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <optional>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/error.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl::cluster_env_detail {

using Env = std::map<std::string, std::string>;

[[noreturn]] inline void bad(const std::string& name, const std::string& value, const std::string& valid) {
  throw Error(PL_ERR_INVALID_ARGUMENT, name + "='" + value + "' is not valid: " + valid);
}

[[noreturn]] inline void missing(const std::string& name, const std::string& why) {
  throw Error(PL_ERR_INVALID_ARGUMENT, name + " is not set: " + why);
}

// A set, non-empty variable (an empty one counts as unset, as Lightning's checks do).
inline std::optional<std::string> get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

inline bool has(const Env& env, const std::string& name) { return get(env, name).has_value(); }

inline std::optional<long long> parse_integer(const std::string& s) {
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t j = i; j < s.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return std::nullopt;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return v;
}

// `name` as an integer in [lo, hi]; `range` says what is valid in words, e.g. "[0, WORLD_SIZE=4)".
inline int int_in(const std::string& name, const std::string& value, long long lo, long long hi,
                  const std::string& range) {
  auto v = parse_integer(value);
  if (!v) bad(name, value, "expected an integer in " + range);
  if (*v < lo || *v > hi) bad(name, value, "it must be in " + range);
  return static_cast<int>(*v);
}

inline int required_int(const Env& env, const std::string& name, long long lo, long long hi, const std::string& range,
                        const std::string& why) {
  auto v = get(env, name);
  if (!v) missing(name, why);
  return int_in(name, *v, lo, hi, range);
}

inline std::string half_open(int lo, const std::string& hi_name, int hi) {
  return "[" + std::to_string(lo) + ", " + hi_name + "=" + std::to_string(hi) + ")";
}

inline std::string positive_range() { return "[1, " + std::to_string(INT_MAX) + "]"; }

inline int read_port(const Env& env, const std::string& name) {
  return int_in(name, *get(env, name), 1, 65535, "[1, 65535]");
}

// A variable that is set, as "NAME=value" (for messages).
inline std::string shown(const Env& env, const std::string& name) { return name + "=" + get(env, name).value_or(""); }

// One quantity (a rank, a size) that several launchers' variables may each give for this process:
// the first of `names` that is set, after checking that every other one that is set says the
// same number.  `why` says why they must agree.  std::nullopt when none is set.
inline std::optional<std::pair<std::string, std::string>> agreed(const Env& env, const std::vector<std::string>& names,
                                                                 const std::string& why) {
  std::optional<std::pair<std::string, std::string>> first;
  for (const auto& name : names) {
    auto v = get(env, name);
    if (!v) continue;
    int_in(name, *v, 0, INT_MAX, "[0, " + std::to_string(INT_MAX) + "]");
    if (!first) {
      first = std::make_pair(name, *v);
    } else if (*parse_integer(*v) != *parse_integer(first->second)) {
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  first->first + "=" + first->second + " and " + name + "=" + *v + " disagree: " + why);
    }
  }
  return first;
}

inline void read_common(const Env& env, ClusterEnv& c) {
  if (auto t = get(env, "PL_JOB_TOKEN")) c.token = *t;
  if (auto a = get(env, "PL_USE_AGENT_STORE")) {
    if (*a != "0" && *a != "1")
      bad("PL_USE_AGENT_STORE", *a, "use 1 (the launcher serves the store) or 0 (rank 0 serves it)");
    c.agent_store = *a == "1";
  }
}

// The checks every source shares once its fields are read.
inline void check_layout(const ClusterEnv& c, const std::string& origin) {
  if (c.local_world_size > c.world_size)
    throw Error(PL_ERR_INVALID_ARGUMENT, origin + ": " + std::to_string(c.local_world_size) +
                                             " processes per node is more than the world size " +
                                             std::to_string(c.world_size));
}

// "MASTER_ADDR=h (from ...), MASTER_PORT=p (from ...) (launcher: source)" for ClusterEnv::rendezvous_from.
inline std::string rendezvous_text(const ClusterEnv& c, const std::string& addr_from, const std::string& port_from) {
  return "MASTER_ADDR=" + c.master_addr + " (" + addr_from + "), MASTER_PORT=" + std::to_string(c.master_port) + " (" +
         port_from + ") (launcher: " + c.source + ")";
}

// Readers of each source (they throw pl::Error naming the variable).
ClusterEnv from_openmpi(const Env& env);
ClusterEnv from_horovod(const Env& env);

}  // namespace pl::cluster_env_detail
