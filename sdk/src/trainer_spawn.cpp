// ddp_spawn: fit() forks one worker per local device; each worker trains as a ddp rank; rank 0
// hands the trained weights and the logged metrics back through a private folder, so that when
// fit returns the parent's module holds them (Lightning leaves the parent's model untouched).
//
// fork, not exec: the workers start from the parent's module, data and options exactly, with no
// re-parsing of the command line.  The parent must not have initialised CUDA before fit (CUDA does
// not survive fork); the store server is started only after the fork, so no thread is forked.
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <random>
#include <thread>

#include "trainer_impl.hpp"

namespace pl {

namespace {

std::string random_hex(size_t bytes) {
  std::random_device rd;
  std::string out;
  const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xffu;
    out += hex[v >> 4];
    out += hex[v & 15];
  }
  return out;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with status " + std::to_string(status);
}

// Reads the store port the parent writes once it serves; bounded by `timeout`.
int read_port(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
  int port = -1;
  return read(fd, &port, sizeof port) == static_cast<ssize_t>(sizeof port) ? port : -1;
}

}  // namespace

void Trainer::Impl::fit_spawn(LightningBase& m, DataLoader& train, DataLoader* val, const std::string& ckpt) {
  namespace fs = std::filesystem;
  // The workers are forked, and a forked child cannot use CUDA once its parent initialised it
  // (counting the devices while resolving the job did): say so rather than fail in the workers.
  if (job.device_type == PL_DEVICE_CUDA)
    throw Error(PL_ERR_UNSUPPORTED,
                "strategy '" + job.strategy +
                    "' forks its workers from this process, which has "
                    "already initialised CUDA (to count the devices), and a forked child cannot use "
                    "CUDA; use strategy 'ddp' under a launcher: plrun --strategy ddp --devices " +
                    std::to_string(local_world) + " -- <program>");
  const int n = local_world;
  const bool serve = node_rank == 0 && !env.agent_store;
  if (serve && env.token.empty()) env.token = random_hex(16);
  char tmpl[] = "/tmp/plrt-spawn-XXXXXX";
  if (!mkdtemp(tmpl))
    throw Error(PL_ERR_RUNTIME, std::string("ddp_spawn: cannot create a temporary folder: ") + std::strerror(errno));
  const std::string results = tmpl;
  std::vector<int> port_pipes;
  std::vector<pid_t> pids;
  std::cout.flush();
  std::fflush(nullptr);
  for (int i = 0; i < n; ++i) {
    int fds[2] = {-1, -1};
    if (serve && pipe(fds) != 0) throw Error(PL_ERR_RUNTIME, std::string("ddp_spawn: pipe: ") + std::strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) throw Error(PL_ERR_RUNTIME, std::string("ddp_spawn: fork: ") + std::strerror(errno));
    if (pid == 0) {
      // ---- the worker: never returns into the caller's code ----
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      int code = 0;
      try {
        if (serve) {
          close(fds[1]);
          spawn_store_port = read_port(fds[0], std::chrono::seconds(60));
          if (spawn_store_port <= 0)
            throw Error(PL_ERR_TIMEOUT, "ddp_spawn: the parent did not start the store within 60 s");
        } else {
          spawn_store_port = env.master_port;
        }
        spawned_worker = true;
        rank = node_rank * n + i;
        local_rank = i;
        RuntimeOptions ro;
        ro.rank = rank;
        rt = std::make_shared<Runtime>(ro);  // rank-prefixed logs; plugins are already loaded
        adopt(m);
        fit_here(m, train, val, ckpt);
        if (rank == 0) {
          nlohmann::json j;
          j["epoch"] = epoch;
          j["global_step"] = step;
          j["samples_trained"] = samples_trained;
          j["effective_batch_size"] = effective_batch;
          j["resumed_from"] = resumed_from;
          j["callback_metrics"] = numbers_to_json(settled());
          j["log_dir"] = log_dir;
          j["callbacks"] = callbacks_state();  // e.g. ModelCheckpoint's best_model_path, for the parent's
          j["should_stop"] = should_stop;
          safetensors::save(results + "/model.safetensors", model->state_dict());
          write_file_atomic(results + "/result.json", j.dump());
        }
        std::vector<double> done{1};  // a last collective, so that no rank exits while a peer still talks to it
        collectives().allreduce(done, PL_REDUCE_SUM);
      } catch (const std::exception& e) {
        std::cerr << "[rank " << (node_rank * n + i) << "] ddp_spawn worker failed: " << e.what() << std::endl;
        code = 1;
      }
      std::cout.flush();
      std::cerr.flush();
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
    if (serve) {
      close(fds[0]);
      port_pipes.push_back(fds[1]);
    }
  }

  // ---- the parent: serve the store, then watch the workers ----
  auto stop_all = [&](int sig) {
    for (pid_t p : pids)
      if (p > 0) kill(p, sig);
  };
  std::string failure;
  try {
    if (serve) {
      StoreOptions so;
      so.host = env.master_addr;
      so.port = env.master_port > 0 ? env.master_port : 0;
      so.is_server = true;
      so.token = env.token;
      so.timeout = o.timeout;
      store = std::make_unique<Store>(*rt, so);
      int port = store->port();
      for (int fd : port_pipes) {
        if (write(fd, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) { /* the worker died: seen below */
        }
        close(fd);
      }
      port_pipes.clear();
    }
  } catch (const std::exception& e) {
    failure = std::string("ddp_spawn: could not serve the store: ") + e.what();
  }
  for (int fd : port_pipes) close(fd);
  // Only our own workers are reaped (waitpid on each pid), never another child of the host program.
  size_t alive = pids.size();
  auto reap = [&](bool record) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      pid_t p = waitpid(pids[i], &status, WNOHANG);
      if (p != pids[i]) continue;
      pids[i] = -1;
      --alive;
      if (record && failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        failure = "ddp_spawn: rank " + std::to_string(node_rank * n + static_cast<int>(i)) + " (pid " +
                  std::to_string(p) + ") " + describe(status);
    }
  };
  while (alive > 0 && failure.empty()) {
    reap(true);
    if (alive > 0 && failure.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!failure.empty()) {
    // Stop the others within seconds: SIGTERM, then SIGKILL after a grace period.
    stop_all(SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (alive > 0 && std::chrono::steady_clock::now() < deadline) {
      reap(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (alive > 0) {
      stop_all(SIGKILL);
      for (auto& q : pids)
        if (q > 0) waitpid(q, nullptr, 0), q = -1;
      alive = 0;
    }
  }
  store.reset();
  if (!failure.empty()) {
    std::error_code ec;
    fs::remove_all(results, ec);
    throw Error(PL_ERR_RUNTIME, failure + "; the other workers were stopped");
  }
  // Rank 0's results (on node 0; other nodes have nothing to load).
  if (fs::exists(results + "/result.json")) {
    auto j = nlohmann::json::parse(read_file(results + "/result.json"));
    auto weights = safetensors::load(results + "/model.safetensors");
    m.trainer_model()->load_state_dict(weights.tensors, true);
    epoch = j.at("epoch").get<int64_t>();
    step = j.at("global_step").get<int64_t>();
    samples_trained = j.at("samples_trained").get<int64_t>();
    effective_batch = j.value("effective_batch_size", int64_t{0});
    resumed_from = j.at("resumed_from").get<std::string>();
    log_dir = j.at("log_dir").get<std::string>();
    auto& settled_values = settled();
    for (const auto& [k, v] : numbers_from_json(j.at("callback_metrics"), "the workers' results"))
      settled_values[k] = v;
    should_stop = j.value("should_stop", false);
    use_callbacks(m);  // this process's callback objects get the workers' final states
    saved_callbacks = j.value("callbacks", nlohmann::json());
    load_callbacks_state();
  }
  std::error_code ec;
  fs::remove_all(results, ec);
}

}  // namespace pl
