// The processes of this machine as /proc shows them, for the tests that check what a job leaves
// behind: pid, parent, process group, state and arguments.  Processes come and go while /proc is
// read: one that is gone by the time its files are read is skipped.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace plrt_test {

struct ProcInfo {
  pid_t pid = 0, ppid = 0, pgrp = 0;
  char state = '?';               // 'Z': a zombie (its command line is empty)
  std::vector<std::string> args;  // the command line, split at its NULs
  bool has_arg(const std::string& a) const {
    for (const auto& x : args)
      if (x == a) return true;
    return false;
  }
};

// A /proc file's bytes, "" when the process is gone: read with read(2), because a read that fails
// (ESRCH: the process exited between open and read) makes std::ifstream's buffer throw
// "basic_filebuf::underflow error reading the file" rather than just end the stream.
inline std::string read_proc_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) out.clear();  // gone half-way: as if gone before
    break;
  }
  ::close(fd);
  return out;
}

inline std::vector<ProcInfo> proc_table() {
  std::vector<ProcInfo> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string line = read_proc_file(it->path() / "stat");
    if (line.empty()) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) continue;
    ProcInfo p;
    p.pid = static_cast<pid_t>(std::atol(name.c_str()));
    std::istringstream rest(line.substr(close + 2));
    long ppid = 0, pgrp = 0;
    if (!(rest >> p.state >> ppid >> pgrp)) continue;
    p.ppid = static_cast<pid_t>(ppid);
    p.pgrp = static_cast<pid_t>(pgrp);
    std::stringstream ss(read_proc_file(it->path() / "cmdline"));
    for (std::string a; std::getline(ss, a, '\0');) p.args.push_back(a);
    out.push_back(std::move(p));
  }
  return out;
}

// `root` and every process under it, at any depth.
inline std::set<pid_t> process_tree(pid_t root, const std::vector<ProcInfo>& table) {
  std::set<pid_t> tree{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& p : table)
      if (tree.count(p.ppid) && tree.insert(p.pid).second) grew = true;
  }
  return tree;
}

// The live processes under `root` (at any depth, `root` excluded) that run `program` (argv[0]),
// e.g. plrun's workers: plrun's pid is its guard, whose child is the supervisor, whose children
// are the workers.
inline std::vector<pid_t> running_under(pid_t root, const std::string& program) {
  const auto table = proc_table();
  const auto tree = process_tree(root, table);
  std::vector<pid_t> out;
  for (const auto& p : table)
    if (p.pid != root && tree.count(p.pid) && p.state != 'Z' && !p.args.empty() && p.args[0] == program)
      out.push_back(p.pid);
  return out;
}

}  // namespace plrt_test
