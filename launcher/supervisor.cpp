#include "supervisor.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <plrt/sdk/error.hpp>
#include <string>

#include "line_prefixer.hpp"
#include "output_sink.hpp"

namespace plrt::launcher {

using Clock = std::chrono::steady_clock;

// ---- SignalChannel ----

namespace {
sigset_t handled_signals() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&s, sig);
  return s;
}
}  // namespace

SignalChannel::SignalChannel() {
  sigset_t s = handled_signals();
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
    if (info.ssi_signo != SIGCHLD) return static_cast<int>(info.ssi_signo);
  }
}

// ---- the supervisor ----

namespace {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string plural(size_t n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

struct Worker {
  Worker(Launch l)
      : spec(std::move(l.spec)),
        image(std::move(l.image)),
        lines{LinePrefixer(spec.prefix, spec.node_level), LinePrefixer(spec.prefix, spec.node_level)} {}
  WorkerSpec spec;
  ExecImage image;
  pid_t pid = -1;
  bool reaped = false;
  int fds[2] = {-1, -1};  // its stdout, its stderr
  LinePrefixer lines[2];

  bool running() const { return pid > 0 && !reaped; }
};

class Supervisor {
 public:
  Supervisor(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& o)
      : signals_(signals), o_(o), sinks_{OutputSink(o.out_fd), OutputSink(o.err_fd)} {
    for (auto& l : launches) workers_.emplace_back(std::move(l));
  }

  SuperviseResult run() {
    start_all();
    loop();
    for (auto& w : workers_)
      for (int k = 0; k < 2; ++k) close_stream(w, k);
    for (auto& s : sinks_) s.flush(2000);
    result_.code = exit_code_.value_or(0);
    return result_;
  }

 private:
  void say(const std::string& line) { sinks_[1].append("plrun: " + line + "\n"); }

  void start_all() {
    for (auto& w : workers_) {
      if (int sig = signals_.take()) {  // e.g. a Ctrl-C while the store was starting
        on_signal(sig);
        return;
      }
      StartedWorker s;
      try {
        s = start_worker(w.image);
      } catch (const pl::Error& e) {  // no pipe or no fork: stop the ones already started, in order
        say(std::string(e.what()) + " (" + w.spec.label + "); stopping the job");
        exit_code_ = 1;
        begin_stop(SIGTERM);
        return;
      }
      if (s.exec_errno) {
        say("cannot execute '" + w.image.argv[0] + "' (" + w.image.path + ") for " + w.spec.label + ": " +
            std::strerror(s.exec_errno) + "; stopping the job");
        exit_code_ = 127;  // as a shell does
        WorkerEvent ev;
        ev.index = static_cast<size_t>(&w - workers_.data());
        ev.label = w.spec.label;
        ev.code = 127;
        ev.how = std::string("could not be executed (") + std::strerror(s.exec_errno) + ")";
        result_.failure = ev;
        begin_stop(SIGTERM);
        return;
      }
      w.pid = s.pid;
      w.fds[0] = s.out_fd;
      w.fds[1] = s.err_fd;
    }
  }

  void loop() {
    std::optional<Clock::time_point> drain_until;
    for (;;) {
      const auto now = Clock::now();
      if (all_ended()) {
        if (!drain_until) {
          // Whatever a worker left in its process group is an orphan of the job by now.
          signal_groups(SIGKILL);
          drain_until = now + o_.drain;
        }
        if (!any_stream_open() || now >= *drain_until) return;
      } else if (give_up_at_ && now >= *give_up_at_) {
        for (const auto& w : workers_)
          if (w.running())
            say(w.spec.label + " (pid " + std::to_string(w.pid) + ") has not ended " +
                std::to_string(o_.after_kill.count()) + " ms after SIGKILL; leaving it");
        return;
      }
      if (kill_at_ && !give_up_at_ && now >= *kill_at_) {
        std::string names;
        for (const auto& w : workers_)
          if (w.running()) names += (names.empty() ? "" : ", ") + w.spec.label;
        if (!names.empty())
          say("still running after the " + std::to_string(o_.grace.count()) + " ms grace period: " + names +
              "; sending SIGKILL");
        kill_now();
      }
      poll_once(timeout_ms(drain_until));
      reap();
    }
  }

  int timeout_ms(const std::optional<Clock::time_point>& drain_until) const {
    auto next = Clock::now() + std::chrono::seconds(1);  // a safety net: the loop wakes on events
    if (kill_at_ && !give_up_at_) next = std::min(next, *kill_at_);
    if (give_up_at_) next = std::min(next, *give_up_at_);
    if (drain_until) next = std::min(next, *drain_until);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
    return static_cast<int>(std::max<long long>(ms, 0));
  }

  void poll_once(int timeout) {
    std::vector<pollfd> fds = {
        {signals_.fd(), POLLIN, 0}, {sinks_[0].fd(), sinks_[0].events(), 0}, {sinks_[1].fd(), sinks_[1].events(), 0}};
    std::vector<std::pair<Worker*, int>> owners;
    stop_index_.reset();
    if (o_.stop_fd >= 0 && !stopping_) {
      stop_index_ = fds.size();
      fds.push_back({o_.stop_fd, POLLIN, 0});
    }
    const size_t first_stream = fds.size();
    for (auto& w : workers_)
      for (int k = 0; k < 2; ++k)
        // A sink that is far behind stops the reading: the workers then wait on their pipes
        // (back pressure) while plrun still handles signals.
        if (w.fds[k] >= 0 && sinks_[k].buffered() < kMaxBuffered) {
          fds.push_back({w.fds[k], POLLIN, 0});
          owners.emplace_back(&w, k);
        }
    // poll reports POLLHUP/POLLERR even for an fd asked for no events; -1 skips a sink with
    // nothing to write, so that a closed stdout does not wake the loop at once, again and again.
    for (int i = 1; i <= 2; ++i)
      if (fds[i].events == 0) fds[i].fd = -1;
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      say(std::string("poll failed: ") + std::strerror(errno) + "; stopping the job");
      if (!exit_code_) exit_code_ = 1;
      kill_now();
      return;
    }
    if (n <= 0) return;
    if (fds[0].revents)
      while (int sig = signals_.take()) on_signal(sig);
    if (stop_index_ && fds[*stop_index_].revents && !stopping_) {
      result_.stop_requested = true;
      begin_stop(SIGTERM);
    }
    for (size_t i = first_stream; i < fds.size(); ++i)
      if (fds[i].revents) read_stream(*owners[i - first_stream].first, owners[i - first_stream].second);
    for (int k = 0; k < 2; ++k)
      if (fds[k + 1].revents) sinks_[k].on_ready(fds[k + 1].revents);
  }

  void read_stream(Worker& w, int k) {
    char buf[65536];
    std::string out;
    for (int i = 0; i < 4; ++i) {  // at most 256 KiB per turn, so that one chatty worker does not starve the others
      ssize_t n = ::read(w.fds[k], buf, sizeof buf);
      if (n > 0) {
        w.lines[k].feed(std::string_view(buf, static_cast<size_t>(n)), out);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      sinks_[k].append(out);
      close_stream(w, k);  // EOF (or an error): every writer of this pipe is gone
      return;
    }
    sinks_[k].append(out);
  }

  void close_stream(Worker& w, int k) {
    if (w.fds[k] < 0) return;
    std::string out;
    w.lines[k].finish(out);  // the unfinished last line
    sinks_[k].append(out);
    ::close(w.fds[k]);
    w.fds[k] = -1;
  }

  void reap() {
    for (auto& w : workers_) {
      if (!w.running()) continue;
      int status = 0;
      pid_t r;
      do r = ::waitpid(w.pid, &status, WNOHANG);
      while (r < 0 && errno == EINTR);
      if (r == 0) continue;
      w.reaped = true;
      if (r < 0) continue;  // not our child (cannot happen): nothing to report
      on_exit(w, status);
    }
  }

  void on_exit(const Worker& w, int status) {
    WorkerEvent ev;
    ev.index = static_cast<size_t>(&w - workers_.data());
    ev.label = w.spec.label;
    ev.pid = w.pid;
    if (WIFEXITED(status)) {
      ev.code = WEXITSTATUS(status);
      ev.how = "exited with code " + std::to_string(ev.code);
    } else if (WIFSIGNALED(status)) {
      int sig = WTERMSIG(status);
      ev.kind = WorkerEvent::Kind::killed;
      ev.code = 128 + sig;
      ev.how = "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    } else {
      return;
    }
    if (o_.on_event) o_.on_event(ev, stopping_);
    if (stopping_) return;  // the job is being stopped: its first cause is what counts
    const int code = ev.code;
    const std::string& how = ev.how;
    if (code == 0) return;
    result_.failure = ev;
    size_t others = static_cast<size_t>(
        std::count_if(workers_.begin(), workers_.end(), [](const Worker& x) { return x.running(); }));
    say(w.spec.label + " (pid " + std::to_string(w.pid) + ") " + how +
        (others ? "; stopping the other " + plural(others, "worker") : "; no other worker is running"));
    exit_code_ = code;
    begin_stop(SIGTERM);
  }

  void on_signal(int sig) {
    if (!stopping_) {
      size_t running = static_cast<size_t>(
          std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running(); }));
      say("got " + signal_name(sig) + "; passing it to " + plural(running, "worker") + " (SIGKILL after " +
          std::to_string(o_.grace.count()) + " ms)");
      if (!exit_code_) exit_code_ = 128 + sig;
      if (!result_.failure && !result_.stop_requested) result_.signal = sig;
      begin_stop(sig);
    } else if (!give_up_at_) {
      say("got " + signal_name(sig) + " again; killing the workers now");
      kill_now();
    }
  }

  void begin_stop(int sig) {
    stopping_ = true;
    kill_at_ = Clock::now() + o_.grace;
    signal_groups(sig);
  }

  void kill_now() {
    stopping_ = true;
    give_up_at_ = Clock::now() + o_.after_kill;
    signal_groups(SIGKILL);
  }

  // Each worker's whole process group: the worker and whatever it started.  Ended workers too,
  // for the children they may have left behind.
  void signal_groups(int sig) {
    for (const auto& w : workers_)
      if (w.pid > 0) ::kill(-w.pid, sig);
  }

  bool all_ended() const {
    return std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running(); });
  }
  bool any_stream_open() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.fds[0] >= 0 || w.fds[1] >= 0; });
  }

  static constexpr size_t kMaxBuffered = 4u << 20;

  SignalChannel& signals_;
  SupervisorOptions o_;
  OutputSink sinks_[2];
  std::vector<Worker> workers_;
  bool stopping_ = false;
  std::optional<Clock::time_point> kill_at_, give_up_at_;
  std::optional<int> exit_code_;
  SuperviseResult result_;
  std::optional<size_t> stop_index_;  // stop_fd's place in this turn's poll set
};

}  // namespace

SuperviseResult supervise_round(std::vector<Launch> launches, SignalChannel& signals,
                                const SupervisorOptions& options) {
  Supervisor s(std::move(launches), signals, options);
  return s.run();
}

int supervise(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& options) {
  return supervise_round(std::move(launches), signals, options).code;
}

}  // namespace plrt::launcher
