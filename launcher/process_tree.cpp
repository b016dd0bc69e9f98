#include "process_tree.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <plrt/sdk/error.hpp>
#include <string>
#include <thread>

namespace plrt::launcher {

void become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
    throw pl::Error(PL_ERR_RESOURCE, std::string("plrun: cannot become a child subreaper (PR_SET_CHILD_SUBREAPER): ") +
                                         std::strerror(errno));
}

namespace {

// The parent pid in /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold ')' or spaces),
// or -1.
pid_t parent_of(const char* pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return -1;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  char state = 0;
  int ppid = -1;
  if (!close || std::sscanf(close + 1, " %c %d", &state, &ppid) != 2) return -1;
  return ppid;
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    if (std::strspn(e->d_name, "0123456789") != std::strlen(e->d_name)) continue;
    if (parent_of(e->d_name) == parent) out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  ::closedir(proc);
  return out;
}

int reap_children(const ChildStatus& on_status, bool untraced) {
  int count = 0;
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG | (untraced ? WUNTRACED : 0));
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) return count == 0 && errno == ECHILD ? -1 : count;
    if (pid == 0) return count;
    ++count;
    if (on_status) on_status(pid, status);
  }
}

std::vector<pid_t> kill_children(const std::function<bool(pid_t)>& spare, const ChildStatus& on_status,
                                 std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  const pid_t self = ::getpid();
  for (;;) {
    if (reap_children(on_status) < 0) return {};  // no child at all
    std::vector<pid_t> targets;
    for (pid_t c : children_of(self))
      if (!spare || !spare(c)) targets.push_back(c);
    if (targets.empty()) return {};
    if (std::chrono::steady_clock::now() >= until) return targets;
    // Our children, not reaped yet: their pids cannot have been reused.
    for (pid_t c : targets) ::kill(c, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace plrt::launcher
