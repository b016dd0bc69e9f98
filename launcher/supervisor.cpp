#include "supervisor.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <plrt/sdk/error.hpp>
#include <string>

#include "line_prefixer.hpp"
#include "log_file.hpp"
#include "output_sink.hpp"
#include "process_tree.hpp"
#include "progress_line.hpp"

namespace plrt::launcher {

using Clock = std::chrono::steady_clock;

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
  LogFile logs[2];  // --log-dir: its raw stdout and stderr

  // Started and not reaped: its pid, hence its process group's id, is still its own.
  bool running() const { return pid > 0 && !reaped; }
};

// What waitpid's status says, as an event (index and label filled in by the caller).
WorkerEvent describe(const Worker& w, size_t index, int status) {
  WorkerEvent e;
  e.index = index;
  e.label = w.spec.label;
  e.pid = w.pid;
  if (WIFEXITED(status)) {
    e.kind = WorkerEvent::Kind::exited;
    e.code = WEXITSTATUS(status);
    e.how = "exited with code " + std::to_string(e.code);
  } else if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    e.kind = WorkerEvent::Kind::killed;
    e.code = 128 + sig;
    e.how = "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  } else {
    const int sig = WSTOPSIG(status);
    e.kind = WorkerEvent::Kind::stopped;
    e.code = 128 + sig;
    e.how = "was stopped by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  }
  return e;
}

class Supervisor {
 public:
  Supervisor(std::vector<Launch> launches, SignalChannel& signals, const SupervisorOptions& o)
      : signals_(signals), o_(o), sinks_{OutputSink(o.out_fd), OutputSink(o.err_fd)}, watch_stop_fd_(o.stop_fd >= 0) {
    merge_stdout_ = o.progress_bar && ::isatty(o.out_fd);
    for (auto& l : launches) workers_.emplace_back(std::move(l));
  }

  SuperviseResult run() {
    become_subreaper();
    start_all();
    loop();
    for (auto& w : workers_)
      for (int k = 0; k < 2; ++k) close_stream(w, k);
    if (o_.progress_bar) {
      std::string out;
      bar_.close(out);
      sinks_[1].append(out);
    }
    for (auto& s : sinks_) s.flush(2000);
    SuperviseResult r;
    r.code = exit_code_.value_or(0);
    r.failure = failure_;
    r.signal = signal_;
    r.stop_requested = stop_requested_;
    return r;
  }

 private:
  void say(const std::string& line) { emit(1, "plrun: " + line + "\n"); }

  // Complete lines for plrun's stdout (k = 0) or stderr (1), through the progress line when it is on.
  void emit(int k, const std::string& lines) {
    if (lines.empty()) return;
    if (!o_.progress_bar || (k == 0 && !merge_stdout_)) return sinks_[k].append(lines);
    std::string out;
    bar_.feed(lines, out);
    sinks_[1].append(out);
  }

  void start_all() {
    if (signals_.guard_gone()) {  // an earlier round saw it: start nothing
      on_signal(SIGKILL);
      return;
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (int sig = signals_.take()) {  // e.g. a Ctrl-C while the store was starting
        on_signal(sig);
        return;
      }
      if (stop_fd_ready()) {
        on_stop_request();
        return;
      }
      open_logs(w);
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
        WorkerEvent e;
        e.index = i;
        e.label = w.spec.label;
        e.pid = s.pid;
        e.code = 127;  // as a shell does
        e.how = "could not be executed: " + std::string(std::strerror(s.exec_errno));
        notify(e);
        say("cannot execute '" + w.image.argv[0] + "' (" + w.image.path + ") for " + w.spec.label + ": " +
            std::strerror(s.exec_errno) + "; stopping the job");
        exit_code_ = 127;
        failure_ = e;
        begin_stop(SIGTERM);
        return;
      }
      w.pid = s.pid;
      w.fds[0] = s.out_fd;
      w.fds[1] = s.err_fd;
    }
  }

  // Before the worker starts, so that the files hold its output from the first byte.
  void open_logs(Worker& w) {
    const std::string* paths[2] = {&w.spec.stdout_log, &w.spec.stderr_log};
    for (int k = 0; k < 2; ++k)
      if (std::string why = w.logs[k].open(*paths[k]); !why.empty())
        say("warning: --log-dir: " + why + "; " + w.spec.label + "'s output goes to the terminal only");
  }

  void log_raw(Worker& w, int k, std::string_view data) {
    if (std::string why = w.logs[k].write(data); !why.empty())
      say("warning: --log-dir: " + why + "; " + w.spec.label + "'s further output goes to the terminal only");
  }

  void loop() {
    std::optional<Clock::time_point> drain_until, drain_cap;
    size_t moved = 0;  // bytes read plus bytes still buffered: any change is progress
    for (;;) {
      const auto now = Clock::now();
      if (all_ended()) {
        if (!drain_until) {
          // Whatever a worker left behind is an orphan of the job by now; its output is in the pipes.
          sweep();
          drain_until = Clock::now() + o_.drain;
          drain_cap = Clock::now() + kMaxDrain;
        }
        // The pipes are read to their end: o_.drain without progress (a loaded machine, a slow
        // reader of plrun's output) gives up, and kMaxDrain in all.
        const size_t now_moved = total_read_ + sinks_[0].buffered() + sinks_[1].buffered();
        if (now_moved != moved) {
          moved = now_moved;
          drain_until = std::min(Clock::now() + o_.drain, *drain_cap);
        }
        if (!any_stream_open() || Clock::now() >= *drain_until) return;
      } else if (give_up_at_ && now >= *give_up_at_) {
        for (const auto& w : workers_)
          if (w.running())
            say(w.spec.label + " (pid " + std::to_string(w.pid) + ") has not ended " +
                std::to_string(o_.after_kill.count()) + " ms after SIGKILL; leaving it");
        sweep();
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
    std::vector<pollfd> fds = {{signals_.fd(), POLLIN, 0},
                               {sinks_[0].fd(), sinks_[0].events(), 0},
                               {sinks_[1].fd(), sinks_[1].events(), 0},
                               {watch_stop_fd_ ? o_.stop_fd : -1, POLLIN, 0}};
    constexpr size_t kFixed = 4;
    std::vector<std::pair<Worker*, int>> owners;
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
    if (fds[3].revents) on_stop_request();
    for (size_t i = kFixed; i < fds.size(); ++i)
      if (fds[i].revents) read_stream(*owners[i - kFixed].first, owners[i - kFixed].second);
    for (int k = 0; k < 2; ++k)
      if (fds[k + 1].revents) sinks_[k].on_ready(fds[k + 1].revents);
  }

  bool stop_fd_ready() const {
    if (!watch_stop_fd_) return false;
    pollfd p{o_.stop_fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && p.revents != 0;
  }

  void read_stream(Worker& w, int k) {
    char buf[65536];
    std::string out;
    for (int i = 0; i < 4; ++i) {  // at most 256 KiB per turn, so that one chatty worker does not starve the others
      ssize_t n = ::read(w.fds[k], buf, sizeof buf);
      if (n > 0) {
        total_read_ += static_cast<size_t>(n);
        log_raw(w, k, std::string_view(buf, static_cast<size_t>(n)));
        w.lines[k].feed(std::string_view(buf, static_cast<size_t>(n)), out);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      emit(k, out);
      close_stream(w, k);  // EOF (or an error): every writer of this pipe is gone
      return;
    }
    emit(k, out);
  }

  void close_stream(Worker& w, int k) {
    if (w.fds[k] < 0) return;
    std::string out;
    w.lines[k].finish(out);  // the unfinished last line
    emit(k, out);
    ::close(w.fds[k]);
    w.fds[k] = -1;
  }

  // Every child that ended or stopped: a worker's status is acted on, an orphan's dropped (a
  // stopped orphan is killed by the sweep).
  void reap() {
    reap_children([this](pid_t pid, int status) { on_status(pid, status); }, /*untraced=*/true);
  }

  void on_status(pid_t pid, int status) {
    if (WIFCONTINUED(status)) return;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (!w.running() || w.pid != pid) continue;
      if (!WIFSTOPPED(status)) w.reaped = true;
      on_worker_status(i, status);
      return;
    }
  }

  void on_worker_status(size_t index, int status) {
    const Worker& w = workers_[index];
    const WorkerEvent e = describe(w, index, status);
    const bool was_stopping = stopping_;
    notify(e);
    if (was_stopping) return;  // the job is being stopped: its first cause is what counts
    if (e.kind == WorkerEvent::Kind::exited && e.code == 0) return;
    size_t others = static_cast<size_t>(
        std::count_if(workers_.begin(), workers_.end(), [&](const Worker& x) { return x.running() && &x != &w; }));
    std::string stopping = e.kind == WorkerEvent::Kind::stopped ? "; stopping it and " : "; stopping ";
    say(w.spec.label + " (pid " + std::to_string(w.pid) + ") " + e.how +
        (others                                 ? stopping + "the other " + plural(others, "worker")
         : e.kind == WorkerEvent::Kind::stopped ? "; stopping it"
                                                : "; no other worker is running"));
    exit_code_ = e.code;
    failure_ = e;
    begin_stop(SIGTERM);
  }

  void notify(const WorkerEvent& e) {
    if (!o_.on_event) return;
    try {
      o_.on_event(e, stopping_);
    } catch (const std::exception& x) {
      say(std::string("the handler of worker events threw: ") + x.what());
    } catch (...) {
      say("the handler of worker events threw");
    }
  }

  void on_signal(int sig) {
    if (sig == SIGKILL) {  // plrun's guard died: plrun was killed, and nobody waits for the job
      if (!stopping_) {
        signal_ = SIGKILL;
        exit_code_ = 128 + SIGKILL;
      }
      say("plrun's guard (pid " + std::to_string(signals_.guard()) + ") is gone; killing the job");
      kill_now();
      return;
    }
    if (!stopping_) {
      size_t running = static_cast<size_t>(
          std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running(); }));
      say("got " + signal_name(sig) + "; passing it to " + plural(running, "worker") + " (SIGKILL after " +
          std::to_string(o_.grace.count()) + " ms)");
      if (!exit_code_) exit_code_ = 128 + sig;
      signal_ = sig;
      begin_stop(sig);
    } else if (!give_up_at_) {
      say("got " + signal_name(sig) + " again; killing the workers now");
      kill_now();
    }
  }

  void on_stop_request() {
    watch_stop_fd_ = false;  // it stays readable: poll would wake at once, again and again
    if (stopping_) return;
    stop_requested_ = true;
    if (!exit_code_) exit_code_ = 1;
    begin_stop(SIGTERM);
  }

  void begin_stop(int sig) {
    stopping_ = true;
    kill_at_ = Clock::now() + o_.grace;
    signal_groups(sig);
    signal_groups(SIGCONT);  // a stopped worker acts on the signal only once continued
  }

  void kill_now() {
    stopping_ = true;
    give_up_at_ = Clock::now() + o_.after_kill;
    signal_groups(SIGKILL);
  }

  // Each running worker's whole process group: the worker and whatever it started there.  Not a
  // reaped worker's: its pid may belong to another process by now.  What a reaped worker left
  // behind is this process's child (a subreaper), killed by the sweep.
  void signal_groups(int sig) {
    for (const auto& w : workers_)
      if (w.running()) ::kill(-w.pid, sig);
  }

  // Kills this process's children but the running workers, and their children in turn, until none
  // is left (bounded by after_kill).
  void sweep() {
    auto left = kill_children([this](pid_t pid) { return is_running_worker(pid); },
                              [this](pid_t pid, int status) { on_status(pid, status); }, o_.after_kill);
    if (left.empty()) return;
    std::string pids;
    for (pid_t p : left) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
    say("processes left by the workers still there " + std::to_string(o_.after_kill.count()) +
        " ms after SIGKILL: pid " + pids + "; leaving them");
  }

  bool is_running_worker(pid_t pid) const {
    return std::any_of(workers_.begin(), workers_.end(), [&](const Worker& w) { return w.running() && w.pid == pid; });
  }
  bool all_ended() const {
    return std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running(); });
  }
  bool any_stream_open() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.fds[0] >= 0 || w.fds[1] >= 0; });
  }

  static constexpr size_t kMaxBuffered = 4u << 20;
  static constexpr std::chrono::seconds kMaxDrain{10};
  size_t total_read_ = 0;

  SignalChannel& signals_;
  SupervisorOptions o_;
  OutputSink sinks_[2];
  ProgressLine bar_;           // o_.progress_bar: rank 0's bar on sinks_[1]
  bool merge_stdout_ = false;  // the workers' stdout goes to sinks_[1] too (both are terminals)
  std::vector<Worker> workers_;
  bool watch_stop_fd_;
  bool stopping_ = false;
  std::optional<Clock::time_point> kill_at_, give_up_at_;
  std::optional<int> exit_code_;
  std::optional<WorkerEvent> failure_;
  int signal_ = 0;
  bool stop_requested_ = false;
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
