// slurm_worker: one task of an srun step in the SLURM tests.  It writes where pl::ClusterEnv says it
// stands in its job (and the SLURM variables that said so) to <out-dir>/task-<SLURM_PROCID>.json,
// then, with --sleep-ms, waits that long in slices.  A SIGTERM during the wait is recorded: the
// task writes <out-dir>/task-<SLURM_PROCID>.sigterm (the milliseconds since it started) and exits
// 0, as a trainer that checkpoints on SIGTERM and leaves would.  Without a SIGTERM it exits 0 at
// the end of the wait, having written no .sigterm file.
//
//   slurm_worker --out-dir D [--sleep-ms T]
#include <signal.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/cluster_env.hpp>
#include <string>
#include <thread>

namespace {

volatile std::sig_atomic_t g_sigterm = 0;

void on_sigterm(int) { g_sigterm = 1; }

// Written whole, then renamed: a test polling for the file never reads half of it.
void write_atomically(const std::string& path, const std::string& text) {
  {
    std::ofstream f(path + ".tmp");
    f << text;
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  std::string out_dir;
  long sleep_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "slurm_worker: " << f << " needs a value (usage: --out-dir D [--sleep-ms T])\n";
      return 64;
    }
    if (f == "--out-dir")
      out_dir = argv[++i];
    else if (f == "--sleep-ms")
      sleep_ms = std::stol(argv[++i]);
    else {
      std::cerr << "slurm_worker: unknown flag " << f << " (usage: --out-dir D [--sleep-ms T])\n";
      return 64;
    }
  }
  const char* procid = std::getenv("SLURM_PROCID");
  if (out_dir.empty() || !procid) {
    std::cerr << "slurm_worker: needs --out-dir and SLURM_PROCID (run it under srun)\n";
    return 64;
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);

  const std::string base = out_dir + "/task-" + procid;
  nlohmann::json j;
  try {
    const auto c = pl::ClusterEnv::detect();
    j = {{"source", c.source},
         {"rank", c.rank},
         {"world_size", c.world_size},
         {"local_rank", c.local_rank},
         {"local_world_size", c.local_world_size},
         {"node_rank", c.node_rank},
         {"num_nodes", c.num_nodes},
         {"master_addr", c.master_addr},
         {"master_port", c.master_port}};
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  for (const char* name : {"SLURM_PROCID", "SLURM_JOB_ID", "SLURM_NODELIST", "SLURM_JOB_NAME"})
    if (const char* v = std::getenv(name)) j["env"][name] = v;
  write_atomically(base + ".json", j.dump(2));

  const auto until = start + std::chrono::milliseconds(sleep_ms);
  while (!g_sigterm && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (g_sigterm) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    write_atomically(base + ".sigterm", std::to_string(ms.count()) + "\n");
  }
  return 0;
}
