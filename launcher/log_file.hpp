// plrun --log-dir: a worker's stdout or stderr also written, raw (no "[rank N] " prefix), to a file
// of its own, as torchrun's --log-dir keeps <log_dir>/<run_id>/attempt_<n>/<rank>/{stdout,stderr}.log.
// The supervisor writes it from its poll loop: a regular file's writes do not block for long.  A
// file that cannot be opened or written is reported once and dropped; the job goes on (the
// terminal still gets the output).
#pragma once

#include <string>
#include <string_view>

namespace plrt::launcher {

// Makes `dir` (and its parents) and checks that plrun can create files in it.  Throws pl::Error
// (PL_ERR_INVALID_ARGUMENT) naming --log-dir, the folder and why not.  Call before anything starts.
void prepare_log_dir(const std::string& dir);

class LogFile {
 public:
  LogFile() = default;
  ~LogFile();
  LogFile(LogFile&& other) noexcept;
  LogFile& operator=(LogFile&& other) noexcept;
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Opens `path` for appending (O_CLOEXEC: no worker inherits it), creating its folders.  Returns
  // "" or why not.  An empty path opens nothing.
  std::string open(const std::string& path);
  // Appends `data`; the first failure is returned ("" else) and the file dropped.
  std::string write(std::string_view data);
  bool is_open() const { return fd_ >= 0; }

 private:
  void close();
  int fd_ = -1;
  std::string path_;
};

}  // namespace plrt::launcher
