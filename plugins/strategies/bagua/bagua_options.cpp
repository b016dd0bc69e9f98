#include "bagua_options.hpp"

#include <cerrno>
#include <cstdlib>
#include <map>

#include "config_checks.hpp"
#include "plugin_support.hpp"

namespace plrt::bagua {

using plugin::fail;

namespace {

constexpr double kDefaultBucketMb = 10.0;         // Bagua's bucket_size default
constexpr int64_t kMaxSyncIntervalMs = 86400000;  // async's rounds: at least one a day

struct AlgorithmName {
  AlgorithmId a;
  const char* name;
  bool built;
};
const AlgorithmName kAlgorithms[] = {
    {AlgorithmId::kGradientAllreduce, "gradient_allreduce", true},
    {AlgorithmId::kByteGrad, "bytegrad", true},
    {AlgorithmId::kDecentralized, "decentralized", true},
    {AlgorithmId::kLowPrecisionDecentralized, "low_precision_decentralized", true},
    {AlgorithmId::kAsync, "async", true},
    {AlgorithmId::kQAdam, "qadam", true},
};

std::string built_list() {
  std::string s;
  for (const auto& a : kAlgorithms)
    if (a.built)
      s += (s.empty() ? "" : ", ") + std::string(a.name) + (a.a == AlgorithmId::kGradientAllreduce ? " (default)" : "");
  return s;
}

// Which algorithms an option applies to ("" = all).
struct OptionRule {
  const char* key;
  std::vector<AlgorithmId> applies;
};
const OptionRule kRules[] = {
    {"average", {AlgorithmId::kGradientAllreduce, AlgorithmId::kByteGrad}},
    {"communication_interval", {AlgorithmId::kDecentralized, AlgorithmId::kLowPrecisionDecentralized}},
    {"peer_selection_mode", {AlgorithmId::kDecentralized}},
    {"sync_interval_ms", {AlgorithmId::kAsync}},
    {"warmup_steps", {AlgorithmId::kAsync}},
};

const char* const kValid =
    "algorithm, bucket_size_mb, hierarchical, average, communication_interval, peer_selection_mode, "
    "sync_interval_ms, warmup_steps, pg.<name> (passed to the process group)";

int64_t parse_int(const std::string& who, const char* key, const std::string& v, int64_t lo, const char* hint) {
  const char* s = v.c_str();
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(s, &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || v[0] == ' ' || v[0] == '+')
    fail(PL_ERR_INVALID_ARGUMENT, who + ": option " + key + "='" + v +
                                      "' is not valid: it must be an integer >= " + std::to_string(lo) + "; " + hint);
  return x;
}

}  // namespace

const char* algorithm_name(AlgorithmId a) {
  for (const auto& n : kAlgorithms)
    if (n.a == a) return n.name;
  return "?";
}

BaguaOptions parse_options(const std::string& who, const PL_OptionList& list) {
  BaguaOptions o;
  std::map<std::string, std::string> given;  // option -> value, for the applies-to check after the loop
  strategy::for_each_option(who, list, [&](const std::string& key, const std::string& value) {
    if (key == "algorithm") {
      const AlgorithmName* found = nullptr;
      for (const auto& a : kAlgorithms)
        if (value == a.name) found = &a;
      if (found == nullptr || !found->built)
        fail(PL_ERR_INVALID_ARGUMENT,
             who + ": option algorithm='" + value + "' is not valid: the algorithms built are " + built_list() +
                 (found == nullptr ? "" : "; docs/bagua.md specifies " + value + ", which is not built yet"));
      o.algorithm = found->a;
    } else if (key == "average") {
      o.average = ddp::parse_bool_option(who, "average", value);
    } else if (key == "hierarchical") {
      o.hierarchical = ddp::parse_bool_option(who, "hierarchical", value) ? 1 : 0;
    } else if (key == "bucket_size_mb") {
      o.bucket_size_mb = ddp::parse_mb_option(who, "bucket_size_mb", value, kDefaultBucketMb);
    } else if (key == "communication_interval") {
      o.communication_interval =
          parse_int(who, "communication_interval", value, 1, "optimizer steps between two exchanges, default 1");
    } else if (key == "peer_selection_mode") {
      if (value == "all")
        o.peer_selection = PeerSelection::kAll;
      else if (value == "shift_one")
        o.peer_selection = PeerSelection::kShiftOne;
      else
        fail(PL_ERR_INVALID_ARGUMENT, who + ": option peer_selection_mode='" + value +
                                          "' is not valid: use all (default: average over every rank) or shift_one "
                                          "(average with one peer, even world sizes)");
    } else if (key == "sync_interval_ms") {
      o.sync_interval_ms = parse_int(who, "sync_interval_ms", value, 1, "milliseconds between two rounds, default 500");
      if (o.sync_interval_ms > kMaxSyncIntervalMs)
        fail(PL_ERR_INVALID_ARGUMENT, who + ": option sync_interval_ms='" + value +
                                          "' is not valid: it must be an integer from 1 to " +
                                          std::to_string(kMaxSyncIntervalMs) + " (a day); default 500");
    } else if (key == "warmup_steps") {
      o.warmup_steps = parse_int(who, "warmup_steps", value, 0, "steps run as gradient_allreduce first, default 0");
    } else if (key.rfind("pg.", 0) == 0 && key.size() > 3) {
      o.ddp.pg_options.emplace_back(key.substr(3), value);
      return;
    } else {
      fail(PL_ERR_INVALID_ARGUMENT, who + ": unknown option '" + key + "'; valid options: " + kValid);
    }
    given[key] = value;
  });
  for (const auto& r : kRules) {
    if (given.count(r.key) == 0) continue;
    bool applies = false;
    std::string names;
    for (AlgorithmId a : r.applies) {
      applies = applies || a == o.algorithm;
      names += (names.empty() ? "" : ", ") + std::string(algorithm_name(a));
    }
    if (!applies)
      fail(PL_ERR_INVALID_ARGUMENT, who + ": option " + r.key + "='" + given[r.key] + "' does not apply to algorithm=" +
                                        algorithm_name(o.algorithm) + "; it applies to " + names);
  }
  o.ddp.bucket_cap_mb = o.ddp.first_bucket_cap_mb = o.bucket_size_mb;
  return o;
}

void check_world(const std::string& who, const BaguaOptions& o, int32_t peers, bool hierarchical) {
  if (o.algorithm != AlgorithmId::kDecentralized || o.peer_selection != PeerSelection::kShiftOne || peers <= 1 ||
      peers % 2 == 0)
    return;
  if (hierarchical)
    fail(
        PL_ERR_INVALID_ARGUMENT,
        who + ": option peer_selection_mode=shift_one pairs the nodes' leaders when communication is hierarchical, " +
            "and the job has " + std::to_string(peers) +
            " nodes: use an even number of nodes, hierarchical=false (pairs of processes), or peer_selection_mode=all");
  fail(PL_ERR_INVALID_ARGUMENT,
       who + ": option peer_selection_mode=shift_one needs an even world size, and the job has " +
           std::to_string(peers) + " processes: use an even number of devices/nodes, or peer_selection_mode=all");
}

}  // namespace plrt::bagua
