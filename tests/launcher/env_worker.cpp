// env_worker: the program the launcher tests run under plrun.  It reports what plrun gave it (its
// environment, pid and process group, as JSON) and behaves as a test asks: print lines (tagged or
// not, a partial last line, a flood on stderr), exit with a code or die by a signal (one rank
// only), record or ignore stop signals, use the job's store, sleep.
//
//   env_worker [--out-dir D] [--print T] [--eprint T] [--print-tagged T] [--print-logger T]
//              [--print-restart T] (T, a space and PL_RESTART_COUNT on stdout)
//              [--partial T] [--flood-stderr N] [--store-check] [--record-signals]
//              [--ignore-sigterm] [--fail-rank R (--exit-code C | --kill-signal S)] [--delay-ms T]
//              [--sleep-ms T]
//
// --fail-rank: that rank waits for every rank's report (10 s at most), then --delay-ms, then exits
// with --exit-code or raises --kill-signal; the others sleep --sleep-ms and exit 0.
//
// Who it is: "rank-R" (RANK), else "node-N" (NODE_RANK: a process per node).  --out-dir gets
// <who>.json (written atomically, so a test may poll for it) and <who>.sig-<N> for each stop
// signal received with --record-signals.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* const kReported[] = {"RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_RANK",
                                 "LOCAL_WORLD_SIZE",
                                 "NODE_RANK",
                                 "GROUP_RANK",
                                 "MASTER_ADDR",
                                 "MASTER_PORT",
                                 "PL_JOB_TOKEN",
                                 "PL_USE_AGENT_STORE",
                                 "PL_LAUNCH_MODE",
                                 "PL_PLUGIN_PATH",
                                 "PL_TRAINER_ACCELERATOR",
                                 "PL_TRAINER_DEVICES",
                                 "PL_TRAINER_STRATEGY",
                                 "PL_TRAINER_NUM_NODES",
                                 "PL_TRAINER_PRECISION",
                                 "PL_TRAINER_TIMEOUT",
                                 "PL_TRAINER_PROCESS_GROUP_BACKEND",
                                 "PL_TRAINER_STRATEGY_OPTIONS",
                                 "PL_STORE_PREFIX",
                                 "PL_RESTART_COUNT",
                                 "TORCHELASTIC_RESTART_COUNT",
                                 "TORCHELASTIC_MAX_RESTARTS",
                                 "TORCHELASTIC_RUN_ID"};

struct Args {
  std::string out_dir, partial;
  std::vector<std::pair<int, std::string>>
      prints;  // 1: stdout, 2: stderr, 3: tagged, 4: logger style, 5: with the restart count
  int flood = 0;
  bool store_check = false, record_signals = false, ignore_sigterm = false;
  int fail_rank = -1, exit_code = -1, kill_signal = 0;
  int fail_until_restart = -1;  // --fail-rank fails only while PL_RESTART_COUNT is below it (-1: always)
  int exit_early_rank = -1;     // this rank exits 0 right after its report, before --store-check
  int delay_ms = 0, sleep_ms = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "env_worker: " << why << "\n";
  std::exit(64);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(f + " needs a value");
      return argv[++i];
    };
    auto number = [&]() { return std::stoi(value()); };
    if (f == "--out-dir")
      a.out_dir = value();
    else if (f == "--print")
      a.prints.emplace_back(1, value());
    else if (f == "--eprint")
      a.prints.emplace_back(2, value());
    else if (f == "--print-tagged")
      a.prints.emplace_back(3, value());
    else if (f == "--print-logger")
      a.prints.emplace_back(4, value());
    else if (f == "--print-restart")
      a.prints.emplace_back(5, value());
    else if (f == "--partial")
      a.partial = value();
    else if (f == "--flood-stderr")
      a.flood = number();
    else if (f == "--store-check")
      a.store_check = true;
    else if (f == "--record-signals")
      a.record_signals = true;
    else if (f == "--ignore-sigterm")
      a.ignore_sigterm = true;
    else if (f == "--fail-rank")
      a.fail_rank = number();
    else if (f == "--fail-until-restart")
      a.fail_until_restart = number();
    else if (f == "--exit-early-rank")
      a.exit_early_rank = number();
    else if (f == "--exit-code")
      a.exit_code = number();
    else if (f == "--kill-signal")
      a.kill_signal = number();
    else if (f == "--delay-ms")
      a.delay_ms = number();
    else if (f == "--sleep-ms")
      a.sleep_ms = number();
    else
      usage("unknown flag " + f);
  }
  return a;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// ---- signals: recorded from the handler with async-signal-safe calls only ----
char g_marker[3][4096];  // SIGINT, SIGTERM, SIGHUP
bool g_ignore_sigterm = false;

void on_stop_signal(int sig) {
  int slot = sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2;
  int fd = ::open(g_marker[slot], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  if (sig == SIGTERM && g_ignore_sigterm) return;
  ::_exit(128 + sig);
}

void install_handlers(const Args& a, const std::string& who) {
  g_ignore_sigterm = a.ignore_sigterm;
  if (a.record_signals) {
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int k = 0; k < 3; ++k) {
      std::snprintf(g_marker[k], sizeof g_marker[k], "%s/%s.sig-%d", a.out_dir.c_str(), who.c_str(), sigs[k]);
      struct sigaction sa {};
      sa.sa_handler = on_stop_signal;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sigs[k], &sa, nullptr);
    }
  } else if (a.ignore_sigterm) {
    ::signal(SIGTERM, SIG_IGN);
  }
}

void write_report(const Args& a, const std::string& who) {
  nlohmann::json j;
  j["pid"] = ::getpid();
  j["pgid"] = ::getpgrp();
  j["ppid"] = ::getppid();
  nlohmann::json env = nlohmann::json::object();
  for (const char* name : kReported)
    if (const char* v = std::getenv(name)) env[name] = v;
  j["env"] = env;
  const std::string path = a.out_dir + "/" + who + ".json";
  {
    std::ofstream f(path + ".tmp");
    f << j.dump(2);
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Whether `path` holds a report of the round with this restart count (an earlier round's report of
// the same rank stays until the new one replaces it).
bool report_of_round(const std::string& path, const std::string& restart_count) {
  std::ifstream f(path);
  if (!f) return false;
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.contains("env")) return false;
  return j["env"].value("PL_RESTART_COUNT", std::string("0")) == restart_count;
}

// Every rank meets every other through the store plrun serves; rank 0 then leaves at once and the
// others use the store after it has gone: the store must outlive rank 0.
int store_check(int rank) {
  pl::RuntimeOptions ro;
  ro.use_default_dirs = false;
  pl::Runtime rt(ro);
  pl::StoreOptions so;
  so.timeout = std::chrono::seconds(20);
  pl::Store store(rt, so);  // MASTER_ADDR, MASTER_PORT, PL_JOB_TOKEN; a client (PL_USE_AGENT_STORE=1)
  const int world = std::stoi(env_or("WORLD_SIZE", "1"));
  store.set("rank/" + std::to_string(rank), "here");
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("rank/" + std::to_string(r));
  store.wait(keys, std::chrono::seconds(20));
  if (rank == 0) return 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  store.add("after_rank0", 1);
  std::cout << "store ok: " << world << " ranks met; rank 0 gone, store still there: " << store.get("rank/0")
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  const bool has_rank = std::getenv("RANK") != nullptr;
  const int rank = has_rank ? std::stoi(env_or("RANK", "0")) : -1;
  const std::string own_tag =
      has_rank ? "[rank " + std::to_string(rank) + "]" : "[node " + env_or("NODE_RANK", "?") + "]";
  const std::string who = has_rank ? "rank-" + std::to_string(rank) : "node-" + env_or("NODE_RANK", "x");
  install_handlers(a, who);

  for (const auto& [kind, text] : a.prints) {
    if (kind == 1) std::cout << text << "\n";
    if (kind == 2) std::cerr << text << "\n";
    if (kind == 3) std::cout << own_tag << " " << text << "\n";
    if (kind == 4) std::cout << "[12:00:00.000] [info] " << own_tag << " " << text << "\n";
    if (kind == 5) std::cout << text << " " << env_or("PL_RESTART_COUNT", "0") << "\n";
  }
  std::cout.flush();
  std::cerr.flush();
  // The report after the prints: a failing rank waits for every rank's report (below), so a test
  // that reads the others' output finds it there, also when plrun stops them at once.
  if (!a.out_dir.empty()) write_report(a, who);
  for (int i = 0; i < a.flood; ++i) std::cerr << "flood " << i << " " << std::string(40, 'x') << "\n";
  std::cerr.flush();

  if (has_rank && rank == a.exit_early_rank) return 0;
  if (a.fail_until_restart >= 0 && std::stoi(env_or("PL_RESTART_COUNT", "0")) >= a.fail_until_restart)
    a.fail_rank = -1;  // this round succeeds
  try {
    if (a.store_check && store_check(rank) != 0) return 1;
  } catch (const std::exception& e) {
    std::cerr << "store check failed: " << e.what() << std::endl;
    return 1;
  }

  if (has_rank && rank == a.fail_rank) {
    // The others must be up (their handlers installed) before this rank fails, or a test could
    // not tell whether plrun stopped them: wait for their reports of this round, bounded.
    const int world = std::stoi(env_or("WORLD_SIZE", "1"));
    const std::string round = env_or("PL_RESTART_COUNT", "0");
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int r = 0; !a.out_dir.empty() && r < world && std::chrono::steady_clock::now() < until;)
      if (report_of_round(a.out_dir + "/rank-" + std::to_string(r) + ".json", round))
        ++r;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
  if (has_rank && rank == a.fail_rank) {
    if (a.kill_signal) {
      ::signal(a.kill_signal, SIG_DFL);
      ::raise(a.kill_signal);
    }
    if (a.exit_code >= 0) {
      std::cout << a.partial << std::flush;
      return a.exit_code;
    }
  }
  // Sleeps in slices: a signal handler that records and returns (--ignore-sigterm) resumes here.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.sleep_ms);
  while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::cout << a.partial << std::flush;
  return 0;
}
