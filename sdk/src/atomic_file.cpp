// Crash-safe files and folders: write beside the target, fsync, then rename (or exchange) in one
// step, and fsync the folder so that the rename itself survives a power loss.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/error.hpp>
#include <set>
#include <system_error>
#include <vector>

namespace fs = std::filesystem;

namespace pl {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  PL_ErrorCode code = err == ENOENT ? PL_ERR_NOT_FOUND : PL_ERR_RUNTIME;
  throw Error(code, what + " '" + path + "': " + std::strerror(err));
}

// "a/b/" -> "a/b": a trailing slash would put the temporary names inside the folder.
std::string normalized(const std::string& path, const char* who) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p.empty() || p == "/" || p == "." || p == "..")
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string(who) + ": '" + path + "' is not a file or folder name");
  return p;
}

std::string parent_of(const std::string& path) {
  std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", path, errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Creates `path` (O_EXCL when `exclusive`), writes `bytes`, fsyncs and closes it.
void write_synced(const std::string& path, const std::string& bytes, bool exclusive) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0666);
  if (fd < 0) fail("cannot create", path, errno);
  try {
    write_all(fd, bytes, path);
    if (::fsync(fd) != 0) fail("cannot fsync", path, errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail("cannot close", path, errno);
}

// A rename or a new entry is durable only once its folder is fsynced.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open folder", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) fail("cannot fsync folder", dir, err);
}

bool exists_no_follow(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw Error(PL_ERR_RUNTIME, "cannot remove '" + path + "': " + ec.message());
}

// Parses the pid at the start of `rest` ("1234" or "1234-7"); 0 when there is none.
pid_t leading_pid(const std::string& rest, bool allow_suffix) {
  size_t i = 0;
  long long pid = 0;
  while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && pid < 1'000'000'000) pid = pid * 10 + (rest[i++] - '0');
  if (i == 0 || pid <= 0 || pid >= 1'000'000'000) return 0;
  if (i < rest.size() && !(allow_suffix && rest[i] == '-')) return 0;
  return static_cast<pid_t>(pid);
}

bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// The target's name of a leftover ("last" of "last.tmp-12-3"), or "" when `name` is none.
std::string leftover_base(const std::string& name) {
  for (const char* marker : {".tmp-", ".old-"}) {
    const size_t at = name.rfind(marker);
    if (at == std::string::npos || at == 0) continue;
    const std::string rest = name.substr(at + 5);
    const bool tmp = marker[1] == 't';  // write_file_atomic's "<pid>-<counter>"
    if (leading_pid(rest, tmp) == 0) continue;
    const size_t dash = rest.find('-');
    if (dash != std::string::npos &&
        (dash + 1 == rest.size() || rest.find_first_not_of("0123456789", dash + 1) != std::string::npos))
      continue;
    return name.substr(0, at);
  }
  return "";
}

size_t count_leftovers(const std::string& folder) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (!leftover_base(it->path().filename().string()).empty()) ++n;
  return n;
}

}  // namespace

void write_file_atomic(const std::string& path_in, const std::string& bytes) {
  static std::atomic<unsigned long long> counter{0};
  std::string path = normalized(path_in, "write_file_atomic");
  // pid + counter: unique across processes and across threads of this one.
  std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  try {
    write_synced(tmp, bytes, /*exclusive=*/true);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename '" + tmp + "' to", path, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(parent_of(path));
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path, errno);
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fail("cannot read", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

AtomicDir::AtomicDir(std::string path) : path_(normalized(path, "AtomicDir")) {
  tmp_ = path_ + ".tmp-" + std::to_string(::getpid());
  // A folder of this name is stale: left by an earlier AtomicDir of this process that could not
  // clean up, or by a dead process whose pid has been reused.
  if (exists_no_follow(tmp_)) remove_tree(tmp_);
  if (::mkdir(tmp_.c_str(), 0777) != 0) fail("cannot create folder", tmp_, errno);
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);  // nothing to report from a destructor; clean_atomic_leftovers retries
}

void AtomicDir::write(const std::string& name, const std::string& bytes) {
  if (committed_)
    throw Error(PL_ERR_INVALID_ARGUMENT, "AtomicDir '" + path_ + "': write('" + name + "') after commit()");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error(PL_ERR_INVALID_ARGUMENT, "AtomicDir '" + path_ + "': file name '" + name +
                                             "' must be a plain name (not empty, '.' or '..', no '/')");
  write_synced(tmp_ + "/" + name, bytes, /*exclusive=*/false);
}

void AtomicDir::commit() {
  if (committed_) throw Error(PL_ERR_INVALID_ARGUMENT, "AtomicDir '" + path_ + "': commit() called twice");
  fsync_dir(tmp_);  // the files' entries, before the folder becomes visible under `path`
  std::string parent = parent_of(path_);
  if (!exists_no_follow(path_)) {
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename '" + tmp_ + "' to", path_, errno);
    committed_ = true;
    fsync_dir(parent);
    return;
  }
  // Swaps the two names in one step: at every moment `path` is the old folder or the new one.
  // Afterwards the old contents sit under the temporary name.
  if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    fsync_dir(parent);
    std::error_code ec;
    fs::remove_all(tmp_, ec);  // the old contents; a failure leaves a leftover, not a bad commit
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) fail("cannot exchange '" + tmp_ + "' with", path_, errno);
  // The filesystem lacks RENAME_EXCHANGE.  Weaker: between the two renames `path` does not exist,
  // so a crash there leaves no folder under `path` (clean_atomic_leftovers renames the old one
  // back); a reader at that moment finds nothing instead of old or new.
  std::string old = path_ + ".old-" + std::to_string(::getpid());
  if (exists_no_follow(old)) remove_tree(old);
  if (::rename(path_.c_str(), old.c_str()) != 0) fail("cannot rename '" + path_ + "' to", old, errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::rename(old.c_str(), path_.c_str());  // put the old contents back
    fail("cannot rename '" + tmp_ + "' to", path_, err);
  }
  committed_ = true;
  fsync_dir(parent);
  std::error_code ec;
  fs::remove_all(old, ec);
}

void clean_atomic_leftovers(const std::string& path_in) {
  std::string path = normalized(path_in, "clean_atomic_leftovers");
  std::string parent = parent_of(path);
  std::string base = fs::path(path).filename().string();
  const std::string tmp_prefix = base + ".tmp-", old_prefix = base + ".old-";
  std::error_code ec;
  fs::directory_iterator it(parent, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return;  // nothing was ever written there
    throw Error(PL_ERR_RUNTIME, "clean_atomic_leftovers: cannot list '" + parent + "': " + ec.message());
  }
  std::vector<std::string> tmps, olds;
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    if (name.compare(0, tmp_prefix.size(), tmp_prefix) == 0) {
      pid_t pid = leading_pid(name.substr(tmp_prefix.size()), /*allow_suffix=*/true);
      if (pid > 0 && process_gone(pid)) tmps.push_back(entry.path().string());
    } else if (name.compare(0, old_prefix.size(), old_prefix) == 0) {
      pid_t pid = leading_pid(name.substr(old_prefix.size()), /*allow_suffix=*/false);
      if (pid > 0 && process_gone(pid)) olds.push_back(entry.path().string());
    }
  }
  for (const auto& t : tmps) remove_tree(t);
  bool renamed_back = false;
  for (const auto& o : olds) {
    if (!exists_no_follow(path)) {
      // An interrupted fallback commit: roll it back to the last committed folder.
      if (::rename(o.c_str(), path.c_str()) != 0) fail("cannot rename '" + o + "' back to", path, errno);
      renamed_back = true;
    } else {
      remove_tree(o);
    }
  }
  if (renamed_back) fsync_dir(parent);
}

bool is_atomic_leftover_name(const std::string& name) { return !leftover_base(name).empty(); }

int clean_atomic_leftovers_in(const std::string& folder) {
  std::error_code ec;
  std::set<std::string> bases;
  fs::directory_iterator it(folder, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return 0;
    throw Error(PL_ERR_RUNTIME, "clean_atomic_leftovers_in: cannot list '" + folder + "': " + ec.message());
  }
  for (const auto& entry : it) {
    const std::string base = leftover_base(entry.path().filename().string());
    if (!base.empty()) bases.insert(base);
  }
  const size_t before = count_leftovers(folder);
  for (const auto& base : bases) clean_atomic_leftovers((fs::path(folder) / base).string());
  return static_cast<int>(before - std::min(before, count_leftovers(folder)));
}

}  // namespace pl
