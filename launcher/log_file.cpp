#include "log_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <plrt/sdk/error.hpp>

namespace plrt::launcher {

namespace fs = std::filesystem;

void prepare_log_dir(const std::string& dir) {
  auto bad = [&](const std::string& why) {
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "--log-dir '" + dir + "' is not usable: " + why + " (give a folder plrun can create files in)");
  };
  if (dir.empty()) bad("it is empty");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) bad("cannot create it: " + ec.message());
  if (!fs::is_directory(dir, ec)) bad("it is not a folder");
  // access(W_OK) is not enough (a read-only file system, root ignoring modes): try a file.
  std::string probe = (fs::path(dir) / ".plrun-probe-XXXXXX").string();
  int fd = ::mkstemp(probe.data());
  if (fd < 0) bad(std::string("cannot create a file in it: ") + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

LogFile::~LogFile() { close(); }

LogFile::LogFile(LogFile&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

LogFile& LogFile::operator=(LogFile&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void LogFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string LogFile::open(const std::string& path) {
  close();
  if (path.empty()) return "";
  path_ = path;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return "cannot create the folder of " + path + ": " + ec.message();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return "cannot open " + path + ": " + std::strerror(errno);
  return "";
}

std::string LogFile::write(std::string_view data) {
  while (fd_ >= 0 && !data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = "cannot write " + path_ + ": " + (n < 0 ? std::strerror(errno) : "nothing written");
      close();
      return why;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return "";
}

}  // namespace plrt::launcher
