// Finding processes in /proc for the tests of plrun's process tree: the live processes with a
// given argument (a marker such as `sleep 1000.4242` names a job's processes uniquely), a
// process's children, and a bounded wait until a condition holds.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace process_scan {

// Live processes (zombies have an empty command line) with an argument equal to `arg`.
inline std::vector<pid_t> with_arg(const std::string& arg) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::stringstream ss(cmdline);
    for (std::string a; std::getline(ss, a, '\0');)
      if (a == arg) {
        out.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
  }
  return out;
}

// The processes (zombies included) whose parent is `parent`.
inline std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    long ppid;
    if (rest >> state >> ppid && ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
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
