// One GPU per rank, checked through the store before NCCL sees the ranks (see gpu_sharing.hpp).
#include "gpu_sharing.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace plrt::nccl {

using plugin::fail;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTag = "plrt-gpu-v1";

// Store values are '|'-separated: keep the separator out of the fields.
std::string clean(std::string s) {
  std::replace(s.begin(), s.end(), '|', '_');
  return s;
}

int64_t ms_left(Clock::time_point deadline) {
  return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

// "0", "0 and 1", "0, 2 and 3"
std::string and_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

// "ranks 0 and 1 both", "ranks 0, 2 and 3 all"
std::string ranks_sharing(const std::vector<int>& ranks) {
  return "ranks " + and_list(ranks) + (ranks.size() == 2 ? " both" : " all");
}

}  // namespace

GpuIdentity this_host() {
  GpuIdentity g;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') std::snprintf(name, sizeof name, "unknown-host");
  g.hostname = name;
  if (const char* id = std::getenv("NCCL_HOSTID"); id && *id) {  // NCCL's own override of the host
    g.host_id = id;
  } else {
    std::string boot;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot);
    g.host_id = g.hostname + ":" + boot;
  }
  return g;
}

std::string encode(const GpuIdentity& g) {
  return std::string(kTag) + "|" + clean(g.hostname) + "|" + clean(g.host_id) + "|" + clean(g.pci) + "|" +
         std::to_string(g.device);
}

GpuIdentity decode(const std::string& value, const std::string& key) {
  std::vector<std::string> f;
  size_t at = 0;
  for (;;) {
    const size_t bar = value.find('|', at);
    f.push_back(value.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  char* end = nullptr;
  const long device = f.size() == 5 ? std::strtol(f[4].c_str(), &end, 10) : -1;
  if (f.size() != 5 || f[0] != kTag || f[4].empty() || *end != '\0' || device < 0)
    fail(PL_ERR_RUNTIME, "nccl: the store key '" + key + "' holds '" + value.substr(0, 80) +
                             "', which is not a GPU identity of this plrt version (" + kTag +
                             "|host|host id|pci|device); another job on this store?");
  GpuIdentity g;
  g.hostname = f[1];
  g.host_id = f[2];
  g.pci = f[3];
  g.device = static_cast<int>(device);
  return g;
}

std::string shared_gpu_message(const std::vector<GpuIdentity>& by_rank) {
  bool many_hosts = false;
  for (const auto& g : by_rank) many_hosts = many_hosts || g.host_id != by_rank.front().host_id;
  std::vector<bool> seen(by_rank.size(), false);
  std::string parts;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (seen[r]) continue;
    std::vector<int> ranks{static_cast<int>(r)};
    for (size_t q = r + 1; q < by_rank.size(); ++q)
      if (!seen[q] && by_rank[q].same_gpu(by_rank[r])) {
        seen[q] = true;
        ranks.push_back(static_cast<int>(q));
      }
    if (ranks.size() < 2) continue;
    bool one_index = true;
    for (int q : ranks) one_index = one_index && by_rank[static_cast<size_t>(q)].device == by_rank[r].device;
    std::string devices;
    if (one_index) {
      devices = "cuda:" + std::to_string(by_rank[r].device);
    } else {  // CUDA_VISIBLE_DEVICES numbers it differently per process
      for (int q : ranks)
        devices += (devices.empty() ? "" : ", ") + std::string("cuda:") +
                   std::to_string(by_rank[static_cast<size_t>(q)].device) + " on rank " + std::to_string(q);
    }
    parts += (parts.empty() ? "" : "; ") + ranks_sharing(ranks) + " use the GPU at PCI " + by_rank[r].pci +
             (many_hosts ? " on host " + by_rank[r].hostname : "") + " (" + devices + ")";
  }
  if (parts.empty()) return "";
  return "nccl needs one GPU per rank: " + parts +
         "; NCCL cannot run two ranks on one GPU. Give each rank its own GPU, or use process_group_backend='gloo' "
         "to share one (CUDA buffers are staged through host memory)";
}

void check_one_gpu_per_rank(const pg::StoreClient& store, const std::string& key_prefix, int rank, int world,
                            const GpuIdentity& mine, Clock::time_point deadline) {
  if (world <= 1) return;
  const auto t0 = Clock::now();
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key_prefix + std::to_string(r));
  store.set(keys[static_cast<size_t>(rank)], encode(mine));
  try {
    store.wait(keys, ms_left(deadline));
  } catch (const plugin::Failure& f) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < world; ++r)
        if (!store.exists(keys[static_cast<size_t>(r)])) missing.push_back(r);
    } catch (const std::exception&) {
    }
    const long long took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    fail(
        f.code,
        "nccl: every rank publishes its GPU before the communicator is made; after " + std::to_string(took) + " ms " +
            (missing.empty() ? std::string("the wait failed")
                             : (missing.size() == 1 ? "rank " : "ranks ") + and_list(missing) +
                                   (missing.size() == 1 ? " has not published its GPU" : " have not published theirs") +
                                   " (did every rank create the group?)") +
            ": " + f.message);
  }
  std::vector<GpuIdentity> all;
  for (const auto& k : keys) all.push_back(decode(store.get(k, ms_left(deadline)), k));
  const std::string msg = shared_gpu_message(all);
  if (!msg.empty()) fail(PL_ERR_INVALID_ARGUMENT, msg);
}

}  // namespace plrt::nccl
