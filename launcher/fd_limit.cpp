// Raising the soft limit on open files (see fd_limit.hpp).
#include "fd_limit.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace plrt::launcher {

FdLimit raise_fd_limit() {
  FdLimit out;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    out.error = std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno);
    return out;
  }
  out.before = out.soft = rl.rlim_cur;
  out.hard = rl.rlim_max;
  if (rl.rlim_cur == rl.rlim_max) return out;
  rlim_t target = rl.rlim_max;
  if (target == RLIM_INFINITY) {  // Linux refuses more than fs.nr_open
    uint64_t nr_open = 0;
    std::ifstream("/proc/sys/fs/nr_open") >> nr_open;
    target = nr_open > rl.rlim_cur ? nr_open : 1u << 20;
  }
  rlimit raised{target, rl.rlim_max};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    out.error = "setrlimit(RLIMIT_NOFILE, " + std::to_string(target) + "): " + std::strerror(errno);
    return out;
  }
  out.soft = target;
  return out;
}

}  // namespace plrt::launcher
