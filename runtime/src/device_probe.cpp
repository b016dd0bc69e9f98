// The CUDA device probe: a forked child that makes the contexts, the parent that waits for it
// with a deadline.  See device_probe.hpp for why it is a child and what the table holds.
#include "device_probe.hpp"

#include "nvml.hpp"
#include "runtime_impl.hpp"
#include "visible_devices.hpp"

#include <nlohmann/json.hpp>

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
#include <optional>
#include <string>
#include <vector>

namespace plrt::rt {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// The child.  Everything it says goes to `fd` as lines: a header {"visible", "reason", "notes"},
// then one device object per line; or {"probe_error": ...} and exit code 1.

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(3);  // the parent gave up on us
    done += static_cast<size_t>(n);
  }
}

// A PL_Error from the plugin as text, and freed.
std::string take_error(const PL_Host* host, PL_Error* e) {
  std::string s = host->error_message(e);
  host->error_destroy(e);
  return s;
}

void drop_log(PL_HostContext*, PL_LogLevel, const char*, const char*) {}
int32_t no_log(PL_HostContext*, PL_LogLevel) { return 0; }

void probe_in_child(int fd, const PL_AcceleratorApi* api, const PL_Host* host, std::vector<int64_t> exclude) {
  exclude.push_back(static_cast<int64_t>(::getpid()));
  // NVML first: the contexts made below must not show up as "other processes" or utilization.
  NvmlSnapshot nv = nvml_snapshot(exclude);
  std::vector<std::string> notes = nv.notes;

  PL_Accelerator* acc = nullptr;
  const PL_OptionList no_options{sizeof(PL_OptionList), nullptr, 0};
  if (PL_Error* e = api->create(host, &no_options, &acc)) throw std::runtime_error("cuda create: " + take_error(host, e));
  PL_DeviceAvailability avail{};
  avail.struct_size = sizeof avail;
  if (PL_Error* e = api->availability(acc, &avail))
    throw std::runtime_error("cuda availability: " + take_error(host, e));
  avail.reason[sizeof avail.reason - 1] = '\0';
  const int32_t count = avail.device_count > 0 ? avail.device_count : 0;
  if (!nv.available && count > 0)  // without devices the reason says enough
    notes.push_back("NVML is not available (" + nv.error + "): compute modes, other processes' memory and "
                    "utilization are not checked, only whether a context can be made");

  std::vector<std::string> uuids;
  for (const auto& d : nv.devices) uuids.push_back(d.uuid);
  std::vector<std::optional<size_t>> map;
  if (nv.available) map = map_visible_to_nvml(std::getenv("CUDA_VISIBLE_DEVICES"), uuids, size_t(count), &notes);
  map.resize(size_t(count));
  write_all(fd, json{{"visible", count}, {"reason", count ? "" : avail.reason}, {"notes", notes}}.dump(
                    -1, ' ', false, json::error_handler_t::replace) +
                    "\n");

  for (int32_t i = 0; i < count; ++i) {
    DeviceRecord d;
    d.index = i;
    PL_DeviceInfo info{};
    info.struct_size = sizeof info;
    // device_info reads the free memory, so it makes the context; a held exclusive device fails here.
    if (PL_Error* info_error = api->device_info(acc, i, &info)) {
      d.context_ok = false;
      d.context_error = take_error(host, info_error);
    } else {
      info.name[sizeof info.name - 1] = '\0';
      d.name = info.name;
      void* p = nullptr;
      const PL_Device dev{PL_DEVICE_CUDA, i};
      PL_Error* e = api->set_device(acc, i);
      if (!e) e = api->alloc(acc, dev, 1, &p);  // Lightning's check: a tensor on the device
      if (!e && p) e = api->free_memory(acc, dev, p);
      if (e) {
        d.context_ok = false;
        d.context_error = take_error(host, e);
      }
    }
    if (map[size_t(i)] && *map[size_t(i)] < nv.devices.size()) {
      const NvmlDeviceState& s = nv.devices[*map[size_t(i)]];
      if (!d.name.empty() && !s.name.empty() && d.name != s.name) {
        // CUDA's and NVML's numbering differ (see visible_devices.hpp): NVML's data would be another GPU's.
        write_all(fd, json{{"note", "CUDA device " + std::to_string(i) + " is '" + d.name + "' but NVML device " +
                                        std::to_string(*map[size_t(i)]) + " is '" + s.name +
                                        "': its processes and utilization are not checked (set "
                                        "CUDA_DEVICE_ORDER=PCI_BUS_ID)"}}
                              .dump(-1, ' ', false, json::error_handler_t::replace) +
                          "\n");
      } else {
        if (d.name.empty()) d.name = s.name;
        d.uuid = s.uuid;
        d.compute_mode = s.compute_mode;
        d.processes = s.processes;
        d.utilization_percent = s.utilization_percent;
      }
    }
    write_all(fd, device_to_json(d) + "\n");
  }
  api->destroy(acc);
}

[[noreturn]] void child_main(int fd, const PL_AcceleratorApi* api, const PL_Host* host, std::vector<int64_t> exclude,
                             pid_t parent) {
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
    probe_in_child(fd, api, host, std::move(exclude));
  } catch (const std::exception& e) {
    write_all(fd, json{{"probe_error", e.what()}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
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
  if (out.timed_out) ended = "no answer within " + std::to_string(timeout.count()) + " ms (the probe was stopped)";
  else if (out.status != -1 && WIFSIGNALED(out.status)) ended = "the probe died with " + signal_text(WTERMSIG(out.status));
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

DeviceTable probe_cuda_devices(PL_Runtime* rt, std::chrono::milliseconds timeout) {
  DeviceTable t;
  PL_ResolvedPlugin cuda{};
  cuda.struct_size = sizeof cuda;
  if (PL_Error* e = pl_runtime_find_plugin(rt, PL_PLUGIN_ACCELERATOR, "cuda", &cuda)) {
    t.reason = std::string("no cuda accelerator plugin: ") + pl_error_message(e);
    pl_error_destroy(e);
    return t;
  }
  const auto* api = static_cast<const PL_AcceleratorApi*>(cuda.plugin->api);
  if (api->device_type != PL_DEVICE_CUDA || !PL_HAS_FIELD(PL_AcceleratorApi, api, free_memory) || !api->alloc ||
      !api->free_memory) {
    t.reason = std::string("the plugin '") + cuda.plugin->name + "' (" + cuda.path +
               ") is not a CUDA accelerator with alloc and free_memory";
    return t;
  }
  // The child's host table: the runtime's, minus logging (see device_probe.hpp).
  PL_Host host = rt->host;
  host.log = drop_log;
  host.log_enabled = no_log;
  const std::vector<int64_t> exclude = {static_cast<int64_t>(::getpid())};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail(PL_ERR_RESOURCE, std::string("device probe: pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    fail(PL_ERR_RESOURCE, std::string("device probe: fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], api, &host, exclude, parent);
  }
  ::close(fds[1]);
  rt->logger->debug("device probe: pid {} checks the CUDA devices (at most {} ms)", pid, timeout.count());
  const auto start = Clock::now();
  t = table_from_child(wait_for_child(pid, fds[0], timeout), timeout);
  rt->logger->debug("device probe: {} device(s) in {} ms", t.devices.size(),
                    std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  return t;
}

DeviceTable cuda_device_table(PL_Runtime* rt, std::chrono::milliseconds timeout) {
  const char* path = std::getenv("PL_CUDA_DEVICE_TABLE");
  if (path && *path) {
    rt->logger->debug("usable devices: the simulated table PL_CUDA_DEVICE_TABLE={}", path);
    return read_table_file(path);
  }
  return probe_cuda_devices(rt, timeout);
}

}  // namespace plrt::rt
