// The multi-node tests' two emulated nodes: scripts/netem-cluster (two network namespaces joined by
// a veth pair, each side shaped with tc) driven from GoogleTest.  NetemCluster brings a cluster up
// under a prefix unique to this process and takes it down when it goes out of scope; where the
// machine refuses namespaces or tc (not root) the script exits 77 and the test skips, saying why.
// Every multi-node test runs through here (tests/cluster/).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "spawn.hpp"

namespace plrt_cluster {

constexpr int kRefused = 77;  // the script's exit code where namespaces, veth or tc are refused

// Runs scripts/netem-cluster with `args` (output captured, at most `deadline`).
inline plrt_test::ProcessResult script(std::vector<std::string> args,
                                       std::chrono::milliseconds deadline = std::chrono::seconds(60),
                                       plrt_test::EnvVars env = {}) {
  plrt_test::ProcessSpec spec;
  spec.argv = {NETEM_CLUSTER_PATH};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = std::move(env);
  spec.env.emplace_back("PLRUN", PLRUN_PATH);
  spec.env.emplace_back("PL_LOG_LEVEL", "warn");
  spec.unset_env = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PL_JOB_TOKEN"};
  plrt_test::WaitOptions w;
  w.deadline = deadline;
  return plrt_test::run_job({spec}, w).processes.at(0);
}

// The last line of `output` that is a JSON object (the script prints its JSON on one line, its
// notes on stderr).
inline nlohmann::json last_json(const std::string& output) {
  std::istringstream in(output);
  std::string line, found;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') found = line;
  if (found.empty()) {
    ADD_FAILURE() << "no JSON line in:\n" << output;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(found);
}

// The names `ip netns list` shows that start with `prefix`.
inline std::vector<std::string> namespaces_with(const std::string& prefix) {
  plrt_test::ProcessSpec spec;
  spec.argv = {"ip", "netns", "list"};
  auto r = plrt_test::run_job({spec}, {std::chrono::seconds(10)}).processes.at(0);
  std::vector<std::string> out;
  std::istringstream in(r.output);
  std::string name;
  while (in >> name) {
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
    in.ignore(1 << 20, '\n');  // "(id: N)" after the name
  }
  return out;
}

// A prefix no other test process uses: its pid and a counter.
inline std::string unique_prefix(const std::string& what) {
  static std::atomic<int> n{0};
  return "plt" + std::to_string(getpid()) + what + std::to_string(n++);
}

class NetemCluster {
 public:
  // Brings the cluster up; check refused() (then skip with reason()) and ok() after.
  NetemCluster(const std::string& rate, const std::string& delay = "0.1ms")
      : prefix_(unique_prefix("n")), up_(script({"up", "--rate", rate, "--delay", delay, "--prefix", prefix_})) {
    if (up_.ok()) info_ = last_json(up_.output);
  }
  ~NetemCluster() {
    if (refused()) return;  // nothing was made, and down would be refused too
    auto r = script({"down", "--prefix", prefix_});
    EXPECT_TRUE(r.ok()) << "netem-cluster down: " << r.status() << "\n" << r.output;
    EXPECT_TRUE(namespaces_with(prefix_).empty()) << "namespaces of " << prefix_ << " left behind";
  }
  NetemCluster(const NetemCluster&) = delete;
  NetemCluster& operator=(const NetemCluster&) = delete;

  bool refused() const { return up_.exited && up_.exit_code == kRefused; }
  bool ok() const { return up_.ok(); }
  std::string reason() const { return "netem-cluster up: " + up_.status() + "\n" + up_.output; }
  const std::string& prefix() const { return prefix_; }
  const nlohmann::json& up_info() const { return info_; }

  // The script's `info` now (addresses, shaping, the tbf counters).
  nlohmann::json info() const {
    auto r = script({"info", "--prefix", prefix_});
    EXPECT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    return last_json(r.output);
  }
  // `netem-cluster job` on this cluster: plrun --num-nodes 2, one node per namespace.
  plrt_test::ProcessResult job(const std::vector<std::string>& plrun_flags, const std::vector<std::string>& program,
                               int timeout_s = 60) const {
    std::vector<std::string> a{"job", "--prefix", prefix_, "--timeout", std::to_string(timeout_s), "--"};
    a.insert(a.end(), plrun_flags.begin(), plrun_flags.end());
    a.push_back("--");
    a.insert(a.end(), program.begin(), program.end());
    return script(a, std::chrono::seconds(timeout_s + 30));
  }

 private:
  std::string prefix_;
  plrt_test::ProcessResult up_;
  nlohmann::json info_;
};

}  // namespace plrt_cluster

// Brings `name` up at `rate`; skips the test where the machine refuses namespaces or tc.
#define NETEM_CLUSTER(name, ...)                     \
  plrt_cluster::NetemCluster name(__VA_ARGS__);      \
  if (name.refused()) GTEST_SKIP() << name.reason(); \
  ASSERT_TRUE(name.ok()) << name.reason()
