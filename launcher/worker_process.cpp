#include "worker_process.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <plrt/sdk/error.hpp>
#include <sstream>
#include <thread>

namespace plrt::launcher {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Whether `file` is something exec can run; `why` says what is wrong otherwise and `missing`
// whether it is absent.
bool executable(const std::string& file, std::string* why, bool* missing = nullptr) {
  struct stat st {};
  if (missing) *missing = false;
  if (::stat(file.c_str(), &st) != 0) {
    if (missing) *missing = errno == ENOENT || errno == ENOTDIR;
    *why = errno_text(errno);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    *why = "it is a directory";
    return false;
  }
  if (::access(file.c_str(), X_OK) != 0) {
    *why = "it is not executable (" + errno_text(errno) + ")";
    return false;
  }
  return true;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw pl::Error(PL_ERR_RESOURCE, "plrun: cannot create a pipe for a worker: " + errno_text(errno));
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    close_fd(r);
    close_fd(w);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

std::vector<char*> c_array(const std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (const auto& s : strings) p.push_back(const_cast<char*>(s.c_str()));
  p.push_back(nullptr);
  return p;
}

// The highest fd to mark close-on-exec when close_range is missing (kernels before 5.11).
int max_fd_fallback() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 65536;
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
}

// Reaps a child that is about to exit (it failed to exec), without waiting forever on it.
void reap_failed_child(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);  // SIGKILL: it ends now
}

}  // namespace

std::string find_program(const std::string& program, const std::optional<std::string>& path) {
  if (program.empty()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, "the program to launch is an empty string");
  std::string why;
  if (program.find('/') != std::string::npos) {
    bool missing = false;
    if (executable(program, &why, &missing)) return program;
    throw pl::Error(missing ? PL_ERR_NOT_FOUND : PL_ERR_INVALID_ARGUMENT,
                    "cannot run program '" + program + "': " + why);
  }
  const std::string dirs = path ? *path : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream ss(dirs);
  std::string dir, first_problem;
  while (std::getline(ss, dir, ':')) {
    std::string file = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) continue;
    if (executable(file, &why)) return file;
    if (first_problem.empty()) first_problem = file + ": " + why;
  }
  if (!first_problem.empty())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "cannot run program '" + program + "': " + first_problem);
  throw pl::Error(PL_ERR_NOT_FOUND,
                  "program '" + program + "' not found in PATH (" + dirs + "); give its path, e.g. ./" + program);
}

StartedWorker start_worker(const ExecImage& image) {
  // Everything the child touches is made here, before fork.
  Pipe out, err, status;
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) throw pl::Error(PL_ERR_RESOURCE, "plrun: cannot open /dev/null: " + errno_text(errno));
  std::vector<char*> argv = c_array(image.argv);
  std::vector<char*> envp = c_array(image.env);
  const char* path = image.path.c_str();
  const pid_t parent = ::getpid();
  const int max_fd = max_fd_fallback();
  sigset_t empty;
  sigemptyset(&empty);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);

  const pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(devnull);
    throw pl::Error(PL_ERR_RESOURCE, "plrun: cannot start a worker: fork: " + errno_text(e));
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // plrun died before prctl took effect
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    if (::dup2(devnull, 0) < 0 || ::dup2(out.w, 1) < 0 || ::dup2(err.w, 2) < 0) {
      int e = errno;
      (void)!::write(status.w, &e, sizeof e);
      ::_exit(127);
    }
    // Nothing else of plrun's (the store's sockets, other workers' pipes) leaks into the worker.
    if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0)
      for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    ::execve(path, argv.data(), envp.data());
    int e = errno;
    (void)!::write(status.w, &e, sizeof e);
    ::_exit(127);
  }

  // Also here, so that the group exists before plrun may signal it (whichever runs first wins;
  // EACCES once the child has exec'd is harmless).
  ::setpgid(pid, pid);
  ::close(devnull);
  close_fd(out.w);
  close_fd(err.w);
  close_fd(status.w);

  // The status pipe closes on a successful exec, or brings exec's errno.  Bounded: an exec stuck
  // on a hung file system counts as started, and the supervisor handles it like any worker.
  StartedWorker w;
  w.pid = pid;
  pollfd pfd{status.r, POLLIN, 0};
  int ready;
  do ready = ::poll(&pfd, 1, 10000);
  while (ready < 0 && errno == EINTR);
  if (ready > 0) {
    int e = 0;
    ssize_t n;
    do n = ::read(status.r, &e, sizeof e);
    while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof e)) {
      reap_failed_child(pid);
      w.exec_errno = e != 0 ? e : EINVAL;
      return w;
    }
  }
  for (int fd : {out.r, err.r}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  w.out_fd = out.r;
  w.err_fd = err.r;
  out.r = err.r = -1;  // owned by the caller now
  return w;
}

}  // namespace plrt::launcher
