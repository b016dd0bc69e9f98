// SlurmCluster: the one-node SLURM cluster the SLURM tests run on (see slurm_cluster.hpp).  What
// the daemons insist on, found by trying: munged wants its key 0600 and every folder above its
// socket executable by all (mkdtemp's 0700 is refused), and runs as root without --force; -F keeps
// it in the foreground (it then logs to stderr).  SLURM finds munged through AuthInfo=socket=.
#include "slurm_cluster.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace plrt_slurm {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kDaemonLimit = "300";  // seconds: timeout(1) ends a daemon a killed test left behind
constexpr int kJobPorts = 16;         // consecutive job ids whose derived MASTER_PORT must be free

// `name` in PATH, then in the sbin folders (not in a user's PATH everywhere); "" when absent.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/usr/local/sbin:/sbin";
  std::istringstream dirs(path);
  for (std::string d; std::getline(dirs, d, ':');) {
    if (d.empty()) continue;
    const std::string candidate = d + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

bool port_is_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A first job id whose kJobPorts successors all derive a MASTER_PORT that is free now, so that the
// jobs' rendezvous neither meets another test's port nor another cluster's (every fresh cluster
// would otherwise start at job 1, port 15001).
long pick_first_job_id() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<long> digits(100, 9999 - kJobPorts);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const long id = 10000 + digits(rng);
    bool free = true;
    for (long j = id; free && j < id + kJobPorts; ++j) free = port_is_free(slurm_master_port(j));
    if (free) return id;
  }
  return 10000 + digits(rng);  // a busy machine: take one anyway, the test names the port if it fails
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tail_lines(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos > 0;) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
    ++n;
  }
  return text.substr(pos + 1);
}

// The caller's variables a client must not inherit: a SLURM job around the test binary, or a
// launcher's rank variables, would otherwise steer srun or the workers.
std::vector<std::string> inherited_job_variables() {
  std::vector<std::string> out{"RANK",         "WORLD_SIZE",     "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
                               "NODE_RANK",    "GROUP_RANK",     "MASTER_ADDR",        "MASTER_PORT",
                               "PL_JOB_TOKEN", "PL_LAUNCH_MODE", "PL_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID"};
  for (char** e = environ; e && *e; ++e) {
    const std::string name = std::string(*e).substr(0, std::string(*e).find('='));
    for (const char* prefix : {"SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "OMPI_", "PL_TRAINER_"})
      if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

// Process ids (other than this one) whose environment holds `entry` ("SLURM_CONF=...").
std::vector<pid_t> processes_with_env(const std::string& entry) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    const std::string env = read_file(e.path() / "environ");
    size_t pos = 0;
    while (pos < env.size()) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      if (env.compare(pos, end - pos, entry) == 0) {
        out.push_back(pid);
        break;
      }
      pos = end + 1;
    }
  }
  return out;
}

std::string process_name(pid_t pid) {
  std::string cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  return std::to_string(pid) + " (" + cmd + ")";
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

SlurmCluster::~SlurmCluster() { stop(); }

bool SlurmCluster::fail(const std::string& why) {
  error_ = why;
  return false;
}

bool SlurmCluster::skip(const std::string& why) {
  skip_reason_ = why;
  return false;
}

plrt_test::EnvVars SlurmCluster::cluster_env() const { return {{"SLURM_CONF", conf()}}; }

plrt_test::ProcessResult SlurmCluster::client(std::vector<std::string> argv, std::chrono::milliseconds deadline,
                                              plrt_test::EnvVars env) const {
  plrt_test::ProcessSpec spec;
  if (!argv.empty()) {
    const std::string path = find_program(argv[0]);
    if (!path.empty()) argv[0] = path;
  }
  spec.argv = std::move(argv);
  spec.label = spec.argv.empty() ? "client" : fs::path(spec.argv[0]).filename().string();
  spec.unset_env = inherited_job_variables();
  spec.env = cluster_env();
  spec.env.insert(spec.env.end(), env.begin(), env.end());
  plrt_test::WaitOptions w;
  w.deadline = deadline;
  return plrt_test::run_job({spec}, w).processes.at(0);
}

std::string SlurmCluster::job_field(const std::string& job_id, const std::string& field) const {
  auto r = client({"scontrol", "show", "job", "-o", job_id}, 10s);
  std::istringstream words(r.output);
  for (std::string w; words >> w;)
    if (w.rfind(field + "=", 0) == 0) return w.substr(field.size() + 1);
  return "";
}

std::string SlurmCluster::wait_for_job(const std::string& job_id, std::chrono::milliseconds deadline) const {
  static const std::set<std::string> live{"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", ""};
  const auto until = Clock::now() + deadline;
  while (Clock::now() < until) {
    const std::string state = job_field(job_id, "JobState");
    if (!live.count(state)) return state;
    std::this_thread::sleep_for(250ms);
  }
  return "";
}

std::string SlurmCluster::logs() const {
  std::ostringstream os;
  for (const char* log : {"slurmctld.log", "slurmd.log"})
    os << "---- " << log << " (last lines) ----\n" << tail_lines(read_file(dir_ / "log" / log), 25);
  for (const auto& d : daemons_)
    os << "---- " << d.name << " output (last lines) ----\n" << tail_lines(read_file(d.log), 10);
  return os.str();
}

bool SlurmCluster::make_munge_key() {
  // munged's key: random bytes (as create-munge-key writes them), readable by its owner only.
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string key(1024, '\0');
  if (!urandom.read(key.data(), static_cast<std::streamsize>(key.size()))) return fail("cannot read /dev/urandom");
  const fs::path path = dir_ / "munge" / "munge.key";
  {
    std::ofstream out(path, std::ios::binary);
    out << key;
    if (!out) return fail("cannot write " + path.string());
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  return true;
}

bool SlurmCluster::write_conf() {
  int ctld_port = 0, slurmd_port = 0;
  try {
    ctld_port = plrt_test::free_tcp_port();
    do slurmd_port = plrt_test::free_tcp_port();
    while (slurmd_port == ctld_port);
  } catch (const std::exception& e) {
    return fail(std::string("no free TCP port: ") + e.what());
  }
  first_job_id_ = pick_first_job_id();
  const std::string d = dir_.string();
  std::ofstream(dir_ / "plugstack.conf") << "";  // no SPANK plugins: the system's list is not read
  std::ofstream conf(dir_ / "slurm.conf");
  conf << "# Generated by tests/slurm for one test binary; everything lives in " << d << "\n"
       << "ClusterName=plrttest\n"
       << "SlurmctldHost=" << node_ << "(127.0.0.1)\n"
       << "SlurmUser=root\nSlurmdUser=root\n"
       << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << slurmd_port << "\n"
       << "AuthType=auth/munge\nCredType=cred/munge\n"
       << "AuthInfo=socket=" << d << "/munge/munge.socket\n"
       << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
       << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
       << "SlurmctldLogFile=" << d << "/log/slurmctld.log\nSlurmdLogFile=" << d << "/log/slurmd.log\n"
       << "SlurmctldDebug=info\nSlurmdDebug=info\n"
       << "PlugStackConfig=" << d << "/plugstack.conf\n"
       << "MailProg=/bin/true\n"
       << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"  // no cgroups
       << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
       << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
       << "MpiDefault=none\nReturnToService=2\n"
       << "FirstJobId=" << first_job_id_ << "\n"
       << "KillWait=5\n"  // SIGTERM to SIGKILL at a job's end (SLURM's default is 30 s)
       << node_line_ << " NodeAddr=127.0.0.1 State=UNKNOWN\n"
       << "PartitionName=debug Nodes=" << node_ << " Default=YES MaxTime=INFINITE State=UP\n";
  conf.close();
  if (!conf) return fail("cannot write " + (dir_ / "slurm.conf").string());
  return true;
}

bool SlurmCluster::start_daemon(const std::string& name, std::vector<std::string> argv) {
  Daemon d;
  d.name = name;
  d.log = (dir_ / "log" / (name + ".out")).string();
  plrt_test::ProcessSpec spec;
  // sh puts the output in the log, then becomes timeout(1), which becomes the daemon's parent and
  // passes our SIGTERM on to it; all of them stay in the Job's process group.
  spec.argv = {"/bin/sh", "-c",
               "exec timeout -k 5 " + std::string(kDaemonLimit) + " \"$@\" >>\"$PLRT_DAEMON_LOG\" 2>&1", "sh"};
  spec.argv.insert(spec.argv.end(), argv.begin(), argv.end());
  spec.env = cluster_env();
  spec.env.emplace_back("PLRT_DAEMON_LOG", d.log);
  spec.unset_env = inherited_job_variables();
  spec.label = name;
  spec.capture_output = false;
  try {
    d.started = Clock::now();
    d.job = std::make_unique<plrt_test::Job>(std::vector<plrt_test::ProcessSpec>{spec});
  } catch (const std::exception& e) {
    return fail("cannot start " + name + ": " + e.what());
  }
  daemons_.push_back(std::move(d));
  return true;
}

bool SlurmCluster::running(const Daemon& d) const {
  // The Job reaps only in wait(): an ended daemon is a zombie until then.
  const std::string stat = read_file("/proc/" + std::to_string(d.job->pid(0)) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

bool SlurmCluster::wait_until_idle(std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  std::string last;
  while (Clock::now() < until) {
    for (const auto& d : daemons_)
      if (!running(d)) return fail(d.name + " exited while the cluster started\n" + logs());
    auto r = client({"sinfo", "-h", "-N", "-o", "%T"}, 5s);
    last = r.output;
    if (r.ok() && last.rfind("idle", 0) == 0) return true;
    std::this_thread::sleep_for(200ms);
  }
  return fail("the node was not idle within " + std::to_string(deadline.count()) + " ms (sinfo: " + last + ")\n" +
              logs());
}

void SlurmCluster::start() {
  if (up_ || !error_.empty() || !skip_reason_.empty()) return;
  std::map<std::string, std::string> programs;
  for (const char* p :
       {"munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue", "scontrol", "scancel", "timeout"}) {
    programs[p] = find_program(p);
    if (programs[p].empty()) {
      skip(std::string("no ") + p + " program (Debian: apt-get install slurm-wlm munge)");
      return;
    }
  }
  if (::geteuid() != 0) {
    skip("slurmd must run as root to start jobs' tasks (SlurmUser=root); this test runs as uid " +
         std::to_string(::geteuid()));
    return;
  }
  auto node = client({programs["slurmd"], "-C"}, 10s);
  node_line_ = node.output.substr(0, node.output.find('\n'));
  if (!node.ok() || node_line_.rfind("NodeName=", 0) != 0) {
    fail("slurmd -C: " + node.status() + "\n" + node.output);
    return;
  }
  node_ = node_line_.substr(9, node_line_.find(' ') - 9);

  char tmpl[] = "/tmp/plrt-slurm-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    fail(std::string("mkdtemp: ") + std::strerror(errno));
    return;
  }
  dir_ = tmpl;
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);  // munged: 0755
  for (const char* sub : {"munge", "state", "spool", "log"}) fs::create_directory(dir_ / sub);
  if (!make_munge_key() || !write_conf()) return;

  const std::string d = dir_.string();
  if (!start_daemon("munged", {programs["munged"], "-F", "--socket=" + d + "/munge/munge.socket",
                               "--key-file=" + d + "/munge/munge.key", "--log-file=" + d + "/log/munged.log",
                               "--pid-file=" + d + "/munge/munged.pid", "--seed-file=" + d + "/munge/munged.seed"}))
    return;
  const auto until = Clock::now() + 10s;
  while (!fs::exists(dir_ / "munge" / "munge.socket") && Clock::now() < until && running(daemons_.back()))
    std::this_thread::sleep_for(50ms);
  if (!fs::exists(dir_ / "munge" / "munge.socket")) {
    fail("munged made no socket within 10 s\n" + logs());
    return;
  }
  if (!start_daemon("slurmctld", {programs["slurmctld"], "-D", "-f", conf()}) ||
      !start_daemon("slurmd", {programs["slurmd"], "-D", "-f", conf()}) || !wait_until_idle(20s))
    return;
  up_ = true;
}

std::string SlurmCluster::stop_daemon(Daemon& d) {
  if (!d.job) return "";
  d.job->signal(SIGTERM);
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - d.started) + 10s;
  w.kill_grace = 2s;
  auto r = d.job->wait(w);
  d.job.reset();
  return r.timed_out ? d.name + " did not stop within 10 s of SIGTERM (killed)\n" : "";
}

std::string SlurmCluster::kill_leftovers() const {
  std::string out;
  for (pid_t pid : processes_with_env("SLURM_CONF=" + conf())) {
    out += "left running, killed: " + process_name(pid) + "\n";
    ::kill(pid, SIGKILL);
  }
  return out;
}

std::string SlurmCluster::stop() {
  if (stopped_ || dir_.empty()) return "";
  stopped_ = true;
  up_ = false;
  std::string left;
  const bool ctld = daemons_.size() > 1 && running(daemons_[1]);
  if (ctld) {  // every job cancelled while slurmd can still end its tasks (KillWait=5 s)
    auto jobs = client({"squeue", "-h", "-o", "%A"}, 10s);
    std::vector<std::string> cancel{"scancel"};
    std::istringstream ids(jobs.output);
    for (std::string id; ids >> id;) cancel.push_back(id);
    if (cancel.size() > 1) {
      client(cancel, 10s);
      const auto until = Clock::now() + 15s;
      while (Clock::now() < until && !client({"squeue", "-h"}, 5s).output.empty()) std::this_thread::sleep_for(250ms);
    }
  }
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) left += stop_daemon(*it);
  left += kill_leftovers();
  std::error_code ec;
  fs::remove_all(dir_, ec);
  return left;
}

}  // namespace plrt_slurm
