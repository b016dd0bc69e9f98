#include "signal_channel.hpp"

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <plrt/sdk/error.hpp>
#include <string>

namespace plrt::launcher {

namespace {

sigset_t handled_signals(bool with_guard) {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&s, sig);
  if (with_guard) sigaddset(&s, kGuardDeathSignal);
  return s;
}

constexpr auto kSameEvent = std::chrono::seconds(1);

}  // namespace

SignalChannel::SignalChannel(pid_t guard) : guard_(guard) {
  sigset_t s = handled_signals(guard > 0);
  if (int e = ::pthread_sigmask(SIG_BLOCK, &s, nullptr); e != 0)
    throw pl::Error(PL_ERR_RESOURCE, std::string("plrun: cannot block signals: ") + std::strerror(e));
  fd_ = ::signalfd(-1, &s, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw pl::Error(PL_ERR_RESOURCE, std::string("plrun: signalfd: ") + std::strerror(errno));
  ::signal(SIGPIPE, SIG_IGN);
}

SignalChannel::~SignalChannel() {
  if (fd_ >= 0) ::close(fd_);
}

int SignalChannel::take() {
  signalfd_siginfo info;
  for (;;) {
    ssize_t n = ::read(fd_, &info, sizeof info);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof info)) return 0;  // EAGAIN: nothing pending
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;
    if (guard_ > 0 && sig == kGuardDeathSignal) {
      // Reparented away from the guard: it is gone (a sender's pid proves nothing).
      if (guard_gone_ || ::getppid() == guard_) continue;
      guard_gone_ = true;
      if (!first_signal_) first_signal_ = SIGKILL;
      return SIGKILL;
    }
    if (guard_ > 0 && sig > 0 && sig < NSIG) {
      const bool relayed = static_cast<pid_t>(info.ssi_pid) == guard_;
      const auto now = std::chrono::steady_clock::now();
      Seen& last = seen_[sig];
      if (!last.matched && last.relayed != relayed && now - last.at < kSameEvent) {
        last.matched = true;  // the other copy of a signal already taken
        continue;
      }
      last = Seen{now, relayed, false};
    }
    if (!first_signal_) first_signal_ = sig;
    return sig;
  }
}

int SignalChannel::wait_for(std::chrono::milliseconds ms) {
  pollfd p{fd_, POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, static_cast<int>(ms.count()));
  while (n < 0 && errno == EINTR);
  return n > 0 ? take() : 0;
}

}  // namespace plrt::launcher
