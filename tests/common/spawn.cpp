// plrt_test::Job: posix_spawn, one pipe per process for stdout+stderr, a poll loop that reads every
// pipe and reaps with WNOHANG, and a deadline followed by SIGTERM, a grace period and SIGKILL.
#include "spawn.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <system_error>

extern char** environ;

namespace plrt_test {

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
}

std::string env_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// This process's environment minus `unset` and the names in `env`, then `env` (last entry wins).
std::vector<std::string> make_environment(const ProcessSpec& spec) {
  std::set<std::string> drop(spec.unset_env.begin(), spec.unset_env.end());
  for (const auto& kv : spec.env) drop.insert(kv.first);
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e)
    if (!drop.count(env_name(*e))) out.emplace_back(*e);
  std::vector<std::pair<std::string, std::string>> last;
  for (const auto& kv : spec.env) {
    auto it = std::find_if(last.begin(), last.end(), [&](const auto& p) { return p.first == kv.first; });
    if (it != last.end())
      it->second = kv.second;
    else
      last.push_back(kv);
  }
  for (const auto& kv : last) out.push_back(kv.first + "=" + kv.second);
  return out;
}

std::vector<char*> c_array(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (auto& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

std::string ProcessResult::status() const {
  std::string s;
  if (exited)
    s = "exit " + std::to_string(exit_code);
  else if (term_signal)
    s = "killed by signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
  else
    s = "not ended";
  if (timed_out) s += ", still running at the deadline";
  return s;
}

bool JobResult::all_ok() const {
  if (timed_out) return false;
  return std::all_of(processes.begin(), processes.end(), [](const ProcessResult& p) { return p.ok(); });
}

std::vector<size_t> JobResult::still_running() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < processes.size(); ++i)
    if (processes[i].timed_out) out.push_back(i);
  return out;
}

std::string JobResult::report(size_t max_output_chars) const {
  std::ostringstream os;
  if (timed_out) {
    os << "the job passed its deadline after " << elapsed.count() << " ms; still running:";
    auto running = still_running();
    for (size_t i : running) os << " " << processes[i].label;
    if (running.empty()) os << " none of the direct children (their output pipes stayed open)";
    os << "\n";
  }
  for (const auto& p : processes) {
    os << "---- " << p.label << " (pid " << p.pid << "): " << p.status() << " after " << p.elapsed.count() << " ms";
    if (p.output_truncated) os << ", output truncated";
    os << " ----\n";
    if (p.output.size() > max_output_chars)
      os << "[... " << p.output.size() - max_output_chars << " characters left out ...]\n"
         << p.output.substr(p.output.size() - max_output_chars);
    else
      os << p.output;
    if (!p.output.empty() && p.output.back() != '\n') os << "\n";
  }
  return os.str();
}

Job::Job(std::vector<ProcessSpec> specs) : start_(Clock::now()) {
  procs_.resize(specs.size());
  try {
    for (size_t i = 0; i < specs.size(); ++i) start(specs[i], i);
  } catch (...) {
    kill_all(SIGKILL);
    reap(true);
    for (auto& p : procs_)
      if (p.fd >= 0) ::close(p.fd);
    throw;
  }
}

Job::~Job() {
  if (!all_reaped()) {
    kill_all(SIGKILL);
    reap(true);
  }
  for (auto& p : procs_)
    if (p.fd >= 0) ::close(p.fd);
}

pid_t Job::pid(size_t index) const { return procs_.at(index).result.pid; }

void Job::start(const ProcessSpec& spec, size_t index) {
  Proc& p = procs_[index];
  p.result.label = spec.label.empty() ? "process " + std::to_string(index) : spec.label;
  if (spec.argv.empty()) throw std::invalid_argument("plrt_test::Job: " + p.result.label + " has an empty argv");

  int fds[2] = {-1, -1};
  if (spec.capture_output && ::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe2");

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (spec.capture_output) {
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);  // dup2 clears FD_CLOEXEC on 1 and 2
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  }
  if (spec.cwd) posix_spawn_file_actions_addchdir_np(&actions, spec.cwd->c_str());
  // One process group per job (the first process leads it); default signal handling and an empty
  // signal mask, whatever this (test) process has set up.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, pgid_);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);

  std::vector<std::string> argv_s = spec.argv;
  std::vector<std::string> env_s = make_environment(spec);
  auto argv = c_array(argv_s);
  auto envp = c_array(env_s);
  pid_t pid = -1;
  const bool search = spec.argv[0].find('/') == std::string::npos;
  int rc = search ? posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data())
                  : posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (fds[1] >= 0) ::close(fds[1]);
  if (rc != 0) {
    if (fds[0] >= 0) ::close(fds[0]);
    throw std::system_error(rc, std::generic_category(), "cannot start '" + spec.argv[0] + "' for " + p.result.label);
  }
  if (pgid_ == 0) pgid_ = pid;
  if (fds[0] >= 0) ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  p.fd = fds[0];
  p.result.pid = pid;
}

void Job::signal(int sig) const { kill_all(sig); }

void Job::kill_all(int sig) const {
  if (pgid_ > 0 && ::kill(-pgid_, sig) == 0) return;
  for (const auto& p : procs_)  // e.g. a process that left the group
    if (!p.reaped && p.result.pid > 0) ::kill(p.result.pid, sig);
}

bool Job::all_reaped() const {
  return std::all_of(procs_.begin(), procs_.end(), [](const Proc& p) { return p.reaped || p.result.pid <= 0; });
}

void Job::reap(bool block) {
  for (auto& p : procs_) {
    if (p.reaped || p.result.pid <= 0) continue;
    int st = 0;
    pid_t r;
    do r = ::waitpid(p.result.pid, &st, block ? 0 : WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0) continue;
    p.reaped = true;
    p.result.elapsed = since(start_);
    if (r < 0) continue;  // not our child any more: nothing to report
    if (WIFEXITED(st)) {
      p.result.exited = true;
      p.result.exit_code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
      p.result.term_signal = WTERMSIG(st);
    }
  }
}

// Reads whatever the pipes hold until `until` (at most ~20 ms per call so that the caller reaps
// often).  Returns true when every pipe is closed.
bool Job::pump(Clock::time_point until, size_t max_output) {
  std::vector<pollfd> pfds;
  std::vector<Proc*> owners;
  for (auto& p : procs_)
    if (p.fd >= 0) {
      pfds.push_back({p.fd, POLLIN, 0});
      owners.push_back(&p);
    }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  int timeout = static_cast<int>(std::clamp<long long>(left, 0, 20));
  if (pfds.empty()) {
    if (timeout > 0) ::poll(nullptr, 0, timeout);
    return true;
  }
  int n = ::poll(pfds.data(), pfds.size(), timeout);
  if (n <= 0) return false;
  char buf[65536];
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (!pfds[i].revents) continue;
    Proc& p = *owners[i];
    for (;;) {
      ssize_t got = ::read(p.fd, buf, sizeof buf);
      if (got > 0) {
        size_t room = max_output > p.result.output.size() ? max_output - p.result.output.size() : 0;
        p.result.output.append(buf, std::min(room, static_cast<size_t>(got)));
        if (static_cast<size_t>(got) > room) p.result.output_truncated = true;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      ::close(p.fd);  // end of file (or an error): the process and its children closed their ends
      p.fd = -1;
      break;
    }
  }
  return std::none_of(procs_.begin(), procs_.end(), [](const Proc& p) { return p.fd >= 0; });
}

JobResult Job::wait(const WaitOptions& o) {
  if (waited_) throw std::logic_error("plrt_test::Job::wait called twice");
  waited_ = true;
  JobResult out;
  const auto deadline = start_ + o.deadline;
  bool closed = false;
  while (!(closed && all_reaped()) && Clock::now() < deadline) {
    closed = pump(deadline, o.max_output_bytes);
    reap(false);
  }
  if (!(closed && all_reaped())) {
    out.timed_out = true;
    for (auto& p : procs_)
      if (!p.reaped) p.result.timed_out = true;
    kill_all(SIGTERM);
    const auto grace_end = Clock::now() + o.kill_grace;
    while (!all_reaped() && Clock::now() < grace_end) {
      pump(grace_end, o.max_output_bytes);
      reap(false);
    }
    if (!all_reaped() || !closed) kill_all(SIGKILL);  // also any child of theirs left in the group
    reap(true);
    const auto drain_end = Clock::now() + std::chrono::milliseconds(500);
    while (!pump(drain_end, o.max_output_bytes) && Clock::now() < drain_end) {
    }
  }
  out.elapsed = since(start_);
  for (auto& p : procs_) out.processes.push_back(std::move(p.result));
  return out;
}

std::vector<ProcessSpec> dist_job(const DistJobOptions& o) {
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < o.world_size; ++r) {
    ProcessSpec s;
    s.argv = o.argv;
    s.label = "rank " + std::to_string(r);
    s.env = {{"RANK", std::to_string(r)},       {"WORLD_SIZE", std::to_string(o.world_size)},
             {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", std::to_string(o.world_size)},
             {"MASTER_ADDR", o.master_addr},    {"MASTER_PORT", std::to_string(o.master_port)}};
    if (o.agent_store)
      s.env.emplace_back("PL_USE_AGENT_STORE", "1");
    else
      s.unset_env.push_back("PL_USE_AGENT_STORE");
    if (!o.token.empty())
      s.env.emplace_back("PL_JOB_TOKEN", o.token);
    else
      s.unset_env.push_back("PL_JOB_TOKEN");
    s.env.insert(s.env.end(), o.env.begin(), o.env.end());
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string random_token() {
  unsigned char bytes[16] = {};
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(bytes), sizeof bytes)) {
    std::random_device rd;
    for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

namespace {

// Binds 127.0.0.1:`port` (0: any) and closes it again: the port bound, or -1 with *err set.
int bind_loopback(int port, int* err) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof a;
  int bound = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    bound = ntohs(a.sin_port);
  else
    *err = errno;
  ::close(fd);
  return bound;
}

}  // namespace

int free_tcp_port() {
  int err = 0, port = bind_loopback(0, &err);
  if (port < 0) throw std::system_error(err, std::generic_category(), "bind 127.0.0.1:0");
  return port;
}

int free_tcp_ports(int count) {
  std::random_device rd;
  std::uniform_int_distribution<int> first(10000, 20000 - count);
  int err = 0;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int start = first(rd);
    bool all = true;
    for (int p = start; all && p < start + count; ++p) all = bind_loopback(p, &err) == p;
    if (all) return start;
  }
  throw std::system_error(err, std::generic_category(),
                          "no " + std::to_string(count) + " consecutive free ports in [10000, 20000) on 127.0.0.1");
}

}  // namespace plrt_test
