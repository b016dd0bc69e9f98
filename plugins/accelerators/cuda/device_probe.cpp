// The device probe's process handling: a forked child that runs the probe body (probe_child.cpp:
// NVML and the contexts), the parent that waits for it with a deadline and reads its lines back
// into a table.  See device_probe.hpp for why it is a child and what happens when it hangs or dies.
#include "device_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plugin_support.hpp"

namespace plrt::cuda {

using plrt::plugin::fail;

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// The child.  Everything it says goes to the pipe as lines: a header {"visible", "reason", "notes"},
// then one device object per line (and {"note"} lines between them); or {"probe_error": ...} and
// exit code 1.

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(3);  // the parent gave up on us
    done += static_cast<size_t>(n);
  }
}

std::string line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

[[noreturn]] void child_main(int fd, const ProbeBody& body, pid_t parent) {
  // Die with the parent; take the default signal actions back (plrun blocks and ignores some).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(4);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
  const rlimit no_core{0, 0};  // a driver crash here must not dump the parent's whole image
  ::setrlimit(RLIMIT_CORE, &no_core);
  try {
    ProbeSink sink(fd);
    body(sink);
  } catch (const std::exception& e) {
    write_all(fd, line(json{{"probe_error", e.what()}}));
    ::_exit(1);
  } catch (...) {
    write_all(fd, "{\"probe_error\": \"unknown exception\"}\n");
    ::_exit(1);
  }
  ::_exit(0);  // no atexit handlers, no static destructors: they belong to the parent
}

// ---------------------------------------------------------------------------------------------
// The parent.

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : std::string());
}

// Reaps the child, killing it first if it is still running after `grace`.  Returns the wait status,
// or -1 when it cannot be known (SIGCHLD ignored: the kernel reaped it already).
int reap(pid_t pid, std::chrono::milliseconds grace) {
  const auto end = Clock::now() + grace;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= end) break;
    ::usleep(2000);
  }
  ::kill(pid, SIGKILL);
  for (;;) {
    pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
  }
}

struct ChildOutput {
  std::vector<std::string> lines;  // complete lines only
  bool timed_out = false;
  int status = -1;
};

ChildOutput wait_for_child(pid_t pid, int fd, std::chrono::milliseconds timeout) {
  ChildOutput out;
  std::string pending;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (r == 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child has exited (or closed its end)
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
      out.lines.push_back(pending.substr(0, nl));
  }
  ::close(fd);
  out.status = reap(pid, out.timed_out ? std::chrono::milliseconds(0) : std::chrono::milliseconds(5000));
  return out;
}

DeviceTable table_from_child(const ChildOutput& out, std::chrono::milliseconds timeout) {
  const std::string origin = "the CUDA device probe";
  std::string ended;  // why the child stopped early, if it did
  if (out.timed_out)
    ended = "no answer within " + std::to_string(timeout.count()) + " ms (the probe was stopped)";
  else if (out.status != -1 && WIFSIGNALED(out.status))
    ended = "the probe died with " + signal_text(WTERMSIG(out.status));
  else if (out.status != -1 && WIFEXITED(out.status) && WEXITSTATUS(out.status) != 0)
    ended = "the probe exited with code " + std::to_string(WEXITSTATUS(out.status));
  DeviceTable t;
  int64_t visible = -1;
  for (const auto& line : out.lines) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(PL_ERR_INTERNAL, origin + " sent a line that is not JSON: " + line);
    if (j.contains("probe_error")) fail(PL_ERR_RUNTIME, origin + " failed: " + j["probe_error"].get<std::string>());
    if (j.contains("note")) {
      t.notes.push_back(j["note"].get<std::string>());
    } else if (visible < 0) {
      visible = j.at("visible").get<int64_t>();
      t.reason = j.at("reason").get<std::string>();
      for (const auto& n : j.at("notes")) t.notes.push_back(n.get<std::string>());
    } else {
      const auto i = static_cast<int32_t>(t.devices.size());
      t.devices.push_back(device_from_json(line, i, origin, "device " + std::to_string(i)));
    }
  }
  if (visible < 0)
    fail(out.timed_out ? PL_ERR_TIMEOUT : PL_ERR_RUNTIME,
         origin + " did not say how many devices there are: " + (ended.empty() ? "it sent nothing" : ended));
  // The devices it did not get to are occupied as far as anyone can tell: name them and say why.
  for (auto i = static_cast<int32_t>(t.devices.size()); i < visible; ++i) {
    DeviceRecord d;
    d.index = i;
    d.context_ok = false;
    d.context_error = ended.empty() ? "the probe ended before reaching this device" : ended;
    t.devices.push_back(d);
  }
  return t;
}

}  // namespace

void ProbeSink::header(int32_t visible, const std::string& reason, const std::vector<std::string>& notes) {
  write_all(fd_, line(json{{"visible", visible}, {"reason", reason}, {"notes", notes}}));
}

void ProbeSink::device(const DeviceRecord& d) { write_all(fd_, device_to_json(d) + "\n"); }

void ProbeSink::note(const std::string& text) { write_all(fd_, line(json{{"note", text}})); }

DeviceTable run_probe(const ProbeBody& body, std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail(PL_ERR_RESOURCE, std::string("cuda: device probe: pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    fail(PL_ERR_RESOURCE, std::string("cuda: device probe: fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], body, parent);
  }
  ::close(fds[1]);
  return table_from_child(wait_for_child(pid, fds[0], timeout), timeout);
}

}  // namespace plrt::cuda
