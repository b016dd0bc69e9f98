// plrun raises its soft limit on open files (RLIMIT_NOFILE) to the hard limit when it starts: node
// 0's plrun serves the job's store, one socket per connection, and the usual soft limit (1024) is
// soon reached when a flood of connections arrives (the store bounds the connections that have not
// sent the handshake, but the workers' own connections and plrun's pipes count too).  The workers
// inherit the raised limit.
#pragma once

#include <cstdint>
#include <string>

namespace plrt::launcher {

struct FdLimit {
  uint64_t before = 0;  // the soft limit found
  uint64_t soft = 0;    // the soft limit now
  uint64_t hard = 0;
  std::string error;  // why it could not be raised ("" when it was, or already was at the hard limit)
};

// Raises the soft RLIMIT_NOFILE to the hard one (an unlimited hard limit: as far as the kernel
// allows, fs.nr_open).  Never throws; a failure is reported in FdLimit::error and leaves the limit.
FdLimit raise_fd_limit();

}  // namespace plrt::launcher
