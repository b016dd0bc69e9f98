// Helpers for the tests that run the built plrun: a scratch folder, plrun as a job with a
// deadline (tests/common/spawn.hpp), the reports env_worker writes, and whether a process is gone.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proc_table.hpp"
#include "spawn.hpp"

namespace launcher_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A fresh folder under the system's temp folder, removed with its content.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "plrun-launch-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

inline const std::string kPlrun = PLRUN_PATH;
inline const std::string kWorker = ENV_WORKER_PATH;

// plrun's arguments for a process-per-device job of `devices` cpu workers (the test plugin
// independent_c launches one process per device), then `-- env_worker worker_args...`.
inline std::vector<std::string> ppd_job(int devices, const std::vector<std::string>& plrun_flags,
                                        const std::vector<std::string>& worker_args) {
  std::vector<std::string> argv = {kPlrun,       "--plugin-path", PLRT_TEST_PLUGIN_DIR,
                                   "--strategy", "independent_c", "--accelerator",
                                   "cpu",        "--devices",     std::to_string(devices)};
  argv.insert(argv.end(), plrun_flags.begin(), plrun_flags.end());
  argv.push_back("--");
  argv.push_back(kWorker);
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  return argv;
}

// plrun as the test's only process, with PL_PLUGIN_PATH, PL_JOB_TOKEN and the launcher variables
// of the test's own environment removed (unless `env` sets them).
inline plrt_test::ProcessSpec plrun_spec(std::vector<std::string> argv, plrt_test::EnvVars env = {}) {
  plrt_test::ProcessSpec s;
  s.argv = std::move(argv);
  s.env = std::move(env);
  s.unset_env = {"PL_PLUGIN_PATH", "PL_JOB_TOKEN", "PL_LOG_LEVEL",       "RANK",          "WORLD_SIZE", "LOCAL_RANK",
                 "MASTER_ADDR",    "MASTER_PORT",  "PL_USE_AGENT_STORE", "PL_LAUNCH_MODE"};
  s.label = "plrun";
  return s;
}

inline plrt_test::ProcessResult run_plrun(std::vector<std::string> argv, plrt_test::EnvVars env = {},
                                          std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
  plrt_test::WaitOptions w;
  w.deadline = deadline;
  auto r = plrt_test::run_job({plrun_spec(std::move(argv), std::move(env))}, w);
  EXPECT_FALSE(r.timed_out) << r.report();
  return r.processes.at(0);
}

// The report env_worker wrote for `who` ("rank-1", "node-0"); fails the test when it is missing.
inline nlohmann::json report(const ScratchDir& dir, const std::string& who) {
  std::ifstream f(dir.path() / (who + ".json"));
  if (!f) {
    ADD_FAILURE() << "no report from " << who << " in " << dir.str();
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(f);
}

// Waits (at most `timeout`) until every one of `whos` has written its report.
inline bool wait_for_reports(const ScratchDir& dir, const std::vector<std::string>& whos,
                             std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (const auto& w : whos) all = all && fs::exists(dir.path() / (w + ".json"));
    if (all) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Alive: it exists and is not a zombie (an orphan whose reaper does not reap still shows up).
inline bool alive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

// Whether any live process is in process group `pgid` (zombies aside).
inline bool group_alive(pid_t pgid) {
  if (::kill(-pgid, 0) != 0) return false;
  for (const auto& p : plrt_test::proc_table())
    if (p.pgrp == pgid && p.state != 'Z') return true;
  return false;
}

// Every worker of `whos` (and its process group) is gone, within `timeout`.
inline void expect_all_gone(const ScratchDir& dir, const std::vector<std::string>& whos,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  for (const auto& w : whos) {
    auto j = report(dir, w);
    if (!j.contains("pid")) continue;
    pid_t pid = j["pid"].get<pid_t>(), pgid = j["pgid"].get<pid_t>();
    const auto until = Clock::now() + timeout;
    while ((alive(pid) || group_alive(pgid)) && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(alive(pid)) << w << " (pid " << pid << ") is still running";
    EXPECT_FALSE(group_alive(pgid)) << w << "'s process group " << pgid << " still has a process";
  }
}

inline std::vector<std::string> ranks(int first, int count) {
  std::vector<std::string> out;
  for (int r = first; r < first + count; ++r) out.push_back("rank-" + std::to_string(r));
  return out;
}

inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

}  // namespace launcher_test
