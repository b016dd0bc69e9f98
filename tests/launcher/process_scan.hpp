// Finding processes in /proc for the tests of plrun's process tree: the live processes with a
// given argument (a marker such as `sleep 1000.4242` names a job's processes uniquely), a
// process's children, and a bounded wait until a condition holds.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "proc_table.hpp"

namespace process_scan {

// Live processes (zombies have an empty command line) with an argument equal to `arg`.
inline std::vector<pid_t> with_arg(const std::string& arg) {
  std::vector<pid_t> out;
  for (const auto& p : plrt_test::proc_table())
    if (p.has_arg(arg)) out.push_back(p.pid);
  return out;
}

// The processes (zombies included) whose parent is `parent`.
inline std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& p : plrt_test::proc_table())
    if (p.ppid == parent) out.push_back(p.pid);
  return out;
}

// Polls `done` every 10 ms until it holds or `timeout` passed; returns its last value.
template <class F>
bool wait_until(F done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace process_scan
