#include "guard.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <plrt/sdk/error.hpp>
#include <string>

#include "process_tree.hpp"
#include "signal_channel.hpp"

namespace plrt::launcher {

namespace {

void say(const std::string& line) {
  const std::string text = "plrun: " + line + "\n";
  (void)!::write(2, text.data(), text.size());
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

int guard_main(pid_t supervisor, const sigset_t& waited, std::chrono::milliseconds sweep) {
  std::optional<int> status;
  while (!status) {
    siginfo_t info;
    timespec slice{1, 0};  // a safety net: SIGCHLD wakes it
    int sig = ::sigtimedwait(&waited, &info, &slice);
    // Not reaped yet: the supervisor's pid is still its own.
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) ::kill(supervisor, sig);
    reap_children([&](pid_t pid, int st) {
      if (pid == supervisor) status = st;
    });
  }
  // Every process left is an orphan of the job: the supervisor was killed before it could clean up.
  auto left = kill_children(nullptr, nullptr, sweep);
  if (WIFSIGNALED(*status))
    say("the supervisor (pid " + std::to_string(supervisor) + ") was killed by signal " +
        std::to_string(WTERMSIG(*status)) + " (" + signal_name(WTERMSIG(*status)) +
        "); the job's processes were killed");
  if (!left.empty()) {
    std::string pids;
    for (pid_t p : left) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
    say("processes of the job still there " + std::to_string(sweep.count()) + " ms after SIGKILL: " + pids +
        "; leaving them");
  }
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

}  // namespace

GuardSplit start_guard(std::chrono::milliseconds sweep) {
  // Blocked before fork: the guard waits for these, and the supervisor's SignalChannel reads them
  // (kGuardDeathSignal must not kill it by its default action before then).
  sigset_t waited, blocked;
  sigemptyset(&waited);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&waited, sig);
  blocked = waited;
  sigaddset(&blocked, kGuardDeathSignal);
  if (int e = ::pthread_sigmask(SIG_BLOCK, &blocked, nullptr); e != 0)
    throw pl::Error(PL_ERR_RESOURCE, std::string("plrun: cannot block signals: ") + std::strerror(e));
  become_subreaper();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);

  const pid_t guard = ::getpid();
  const pid_t child = ::fork();
  if (child < 0)
    throw pl::Error(PL_ERR_RESOURCE, std::string("plrun: cannot start its supervisor: fork: ") + std::strerror(errno));
  if (child == 0) {
    // The supervisor: a subreaper of its own (supervise sets it), not the guard's.
    ::prctl(PR_SET_PDEATHSIG, kGuardDeathSignal);
    if (::getppid() != guard) std::_Exit(128 + SIGKILL);  // the guard died before prctl took effect
    // SIGQUIT keeps its default action here (a core dump): the guard then cleans up.
    sigset_t quit;
    sigemptyset(&quit);
    sigaddset(&quit, SIGQUIT);
    ::pthread_sigmask(SIG_UNBLOCK, &quit, nullptr);
    GuardSplit s;
    s.guard = guard;
    return s;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a closed stderr must not kill the guard
  GuardSplit s;
  s.guard_exit = guard_main(child, waited, sweep);
  return s;
}

}  // namespace plrt::launcher
