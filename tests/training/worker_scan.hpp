// Finding a plrun job's plrt-mlp workers in /proc (plrun is a guard whose child, the supervisor,
// starts the workers): for the tests that kill or signal a worker as a node's OOM killer or
// Kubernetes would.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace plrt_training {

// A process of /proc: its parent and what it runs.
struct Proc {
  pid_t pid = 0, ppid = 0;
  char state = '?';
  std::string cmdline;
};

// Processes come and go while /proc is read: one that is gone is skipped.
inline std::vector<Proc> processes() {
  std::vector<Proc> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(it->path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    Proc p;
    p.pid = std::atoi(name.c_str());
    p.state = line[close + 2];
    p.ppid = std::atoi(line.c_str() + close + 4);
    std::ifstream cmd(it->path() / "cmdline");
    std::getline(cmd, p.cmdline, '\0');
    std::string rest((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    p.cmdline += " " + rest;
    std::replace(p.cmdline.begin(), p.cmdline.end(), '\0', ' ');
    out.push_back(std::move(p));
  }
  return out;
}

// The live processes under `root` (plrun's pid), at any depth, whose command line starts with
// `program` (default: plrt-mlp).
inline std::vector<pid_t> workers_under(pid_t root, const std::string& program = MLP_PATH) {
  const auto all = processes();
  std::set<pid_t> tree{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& p : all)
      if (tree.count(p.ppid) && tree.insert(p.pid).second) grew = true;
  }
  std::vector<pid_t> out;
  for (const auto& p : all)
    if (p.pid != root && tree.count(p.pid) && p.state != 'Z' && p.cmdline.find(program) == 0) out.push_back(p.pid);
  return out;
}

}  // namespace plrt_training
