// ddp_worker: one rank of a multi-process ddp test (test_ddp_multiprocess.cpp starts W of them).
// Reads the torchrun-style environment, connects to the store the test serves (PL_USE_AGENT_STORE),
// creates the strategy through its plugin's C table with a cpu accelerator and the gloo group, and
// trains ddptest::standard_specs() for a few steps whose "backward" writes rank-dependent gradients,
// checking every number that ddp promises.  One line per failed check; exit 0 passed, 1 a check
// failed, 2 bad usage, 3 an unexpected error.
//
//   ddp_worker train [--strategy ddp|ddp_spawn] [--bucket-cap-mb X] [--first-bucket-cap-mb X]
//                    [--broadcast-buffers true|false] [--steps N] [--accumulate K]
//                    [--order reverse|shuffle] [--skip-ready NAME] [--expect-buckets N]
//                    [--expect-early-per-step N]
//   ddp_worker peer-fails --mode exit|stall [--timeout-ms N] [--tag T]
//       rank W-1 leaves (exits, or stays idle) after setup; the others' after_backward must fail
//       with the process group's message naming it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/store.hpp>
#include <random>
#include <regex>

#include "ddp_harness.hpp"

namespace {

using ddptest::Model;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string scenario;
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? d : it->second;
  }
  long get_int(const std::string& k, long d) const {
    auto it = kv.find(k);
    if (it == kv.end()) return d;
    char* end = nullptr;
    long v = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end) throw std::invalid_argument("--" + k + " '" + it->second + "' is not an integer");
    return v;
  }
};

Flags parse(int argc, char** argv) {
  if (argc < 2) throw std::invalid_argument("usage: ddp_worker <train|peer-fails> [--flag value ...]");
  Flags f;
  f.scenario = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) throw std::invalid_argument("expected --flag value, got '" + a + "'");
    f.kv[a.substr(2)] = argv[++i];
  }
  return f;
}

struct Rank {
  pl::DistEnv env;
  std::unique_ptr<pl::Runtime> rt;
  std::unique_ptr<pl::Store> store;
  pl::Accelerator acc;
  int failed = 0;

  std::string tag() const { return "[rank " + std::to_string(env.rank) + "/" + std::to_string(env.world_size) + "] "; }
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (++failed <= 20) std::cout << tag() << "FAIL " << what << std::endl;
  }
  ddptest::StrategyConfig config(const Flags& f) const {
    ddptest::StrategyConfig c;
    c.rank = env.rank;
    c.world = env.world_size;
    c.local_rank = env.local_rank;
    c.accelerator = acc;
    c.device_ids = {0};
    c.store = store ? store->get() : nullptr;
    c.timeout_ms = f.get_int("timeout-ms", 30000);
    return c;
  }
};

std::string at(const Model& m, size_t i, int64_t j) { return m.spec(i).name + "[" + std::to_string(j) + "]"; }

// Every rank writes its own values; after setup each must hold rank 0's.
void init_rank_values(Model& m, int rank) {
  for (size_t i = 0; i < m.size(); ++i)
    for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_value(i, j, ddptest::init_value(i, j, rank));
}

int run_train(Rank& r, const Flags& f) {
  const int W = r.env.world_size, me = r.env.rank;
  const int steps = static_cast<int>(f.get_int("steps", 4));
  const int accumulate = static_cast<int>(f.get_int("accumulate", 1));
  const std::string order = f.get("order", "reverse"), skip = f.get("skip-ready");
  const bool bcast = f.get("broadcast-buffers", "true") == "true";
  auto cfg = r.config(f);
  for (const char* k : {"bucket-cap-mb", "first-bucket-cap-mb", "broadcast-buffers"})
    if (f.kv.count(k)) {
      std::string key = k;
      std::replace(key.begin(), key.end(), '-', '_');
      cfg.options.emplace_back(key, f.get(k));
    }
  ddptest::Strategy st(*r.rt, f.get("strategy", "ddp"), cfg);
  Model m(ddptest::standard_specs());
  init_rank_values(m, me);
  st.setup(m.params());
  for (size_t i = 0; i < m.size(); ++i)
    for (int64_t j = 0; j < m.spec(i).numel; ++j)
      r.expect(m.value(i, j) == ddptest::init_value(i, j, 0), "after setup " + at(m, i, j) + " is " +
                                                                  std::to_string(m.value(i, j)) + ", rank 0's is " +
                                                                  std::to_string(ddptest::init_value(i, j, 0)));
  const size_t buffer = 2;  // bn.running_mean
  int synced = 0;
  for (int s = 0; s < steps; ++s) {
    const int micro = s % accumulate, window = s - micro;
    const bool sync = micro == accumulate - 1;
    if (micro == 0) m.zero_grads();  // the optimizer's zero_grad after the last step
    st.set_grad_sync(sync);
    for (int64_t j = 0; j < m.spec(buffer).numel; ++j) m.set_value(buffer, j, ddptest::buffer_value(j, me, s));
    st.run_step([&](PL_Device, PL_Parameter* p, size_t n) {
      r.expect(n == m.size() && p == m.params().data(), "run_step handed the step other parameters");
      for (int64_t j = 0; j < m.spec(buffer).numel; ++j) {
        const double want = ddptest::buffer_value(j, bcast ? 0 : me, s);
        r.expect(m.value(buffer, j) == want, "step " + std::to_string(s) + ": in the step " + at(m, buffer, j) +
                                                 " is " + std::to_string(m.value(buffer, j)) + ", expected " +
                                                 std::to_string(want));
      }
      // Backward: gradients in reverse registration order, or a shuffle of this rank's own.
      std::vector<size_t> idx;
      for (size_t i = m.size(); i-- > 0;)
        if (m.spec(i).requires_grad) idx.push_back(i);
      if (order == "shuffle") std::shuffle(idx.begin(), idx.end(), std::mt19937(1000u * me + s));
      for (size_t i : idx) {
        for (int64_t j = 0; j < m.spec(i).numel; ++j) m.set_grad(i, j, m.grad(i, j) + ddptest::grad_value(i, j, me, s));
        if (m.spec(i).name != skip) st.on_grad_ready(i);
      }
    });
    st.after_backward();
    synced += sync;
    // Expected: the local sum over the window so far; after a synced step, its mean over ranks.
    for (size_t i = 0; i < m.size(); ++i) {
      if (!m.spec(i).requires_grad) continue;
      for (int64_t j = 0; j < m.spec(i).numel; ++j) {
        double want = 0;
        for (int q = sync ? 0 : me; q < (sync ? W : me + 1); ++q)
          for (int t = window; t <= s; ++t) want += ddptest::grad_value(i, j, q, t);
        if (sync) want /= W;
        if (m.grad(i, j) != want)
          r.expect(false, "step " + std::to_string(s) + (sync ? " (synced)" : " (no_sync)") + ": grad " + at(m, i, j) +
                              " is " + std::to_string(m.grad(i, j)) + ", expected " + std::to_string(want));
      }
    }
    r.expect(st.stat("steps") == s + 1,
             "stat steps is " + std::to_string(st.stat("steps")) + " after " + std::to_string(s + 1) + " steps");
  }
  const double buckets = st.stat("buckets"), early = st.stat("early_launches");
  const double exposed = st.stat("exposed_allreduce_ms"), total = st.stat("allreduce_ms");
  std::cout << r.tag() << "buckets " << buckets << " early_launches " << early << " exposed_allreduce_ms " << exposed
            << " allreduce_ms " << total << std::endl;
  if (f.kv.count("expect-buckets"))
    r.expect(buckets == f.get_int("expect-buckets", 0),
             "stat buckets is " + std::to_string(buckets) + ", expected " + f.get("expect-buckets"));
  r.expect(st.stat("bucket_bytes") == m.grad_bytes(), "stat bucket_bytes is " +
                                                          std::to_string(st.stat("bucket_bytes")) +
                                                          ", the gradients have " + std::to_string(m.grad_bytes()));
  const double per_step = f.kv.count("expect-early-per-step") ? f.get_int("expect-early-per-step", 0) : buckets;
  r.expect(early == per_step * synced, "stat early_launches is " + std::to_string(early) + ", expected " +
                                           std::to_string(per_step * synced) + " (" + std::to_string(synced) +
                                           " synced steps)");
  r.expect(exposed >= 0 && total >= 0 && exposed <= total + 1e-3, "exposed_allreduce_ms " + std::to_string(exposed) +
                                                                      " must lie in [0, allreduce_ms " +
                                                                      std::to_string(total) + "]");
  r.expect(synced == 0 || total > 0, "allreduce_ms is 0 after " + std::to_string(synced) + " synced steps");
  // The trainer's metric sync uses the strategy's group.
  auto [pg_api, pg] = st.process_group();
  r.expect(pg_api != nullptr && pg != nullptr, "process_group returned no group at world size " + std::to_string(W));
  if (pg_api && pg) {
    std::vector<float> x{static_cast<float>(me + 1)};
    PL_Tensor t = pl::tensor_view(x);
    pl::check(r.rt->host(), pg_api->allreduce(pg, &t, PL_REDUCE_SUM, nullptr));
    r.expect(x[0] == W * (W + 1) / 2.0f,
             "a metric allreduce through the strategy's group gave " + std::to_string(x[0]));
  }
  st.teardown();
  if (!r.failed) std::cout << r.tag() << "train: OK" << std::endl;
  return r.failed ? 1 : 0;
}

// "rank 2", "ranks 1, 2", "missing ranks: 2" ... name rank q.
bool names_rank(const std::string& msg, int q) {
  std::regex re("ranks?[^0-9a-zA-Z]{0,4}([0-9]+[^0-9a-zA-Z]{1,3})*" + std::to_string(q) + "([^0-9]|$)",
                std::regex::icase);
  return std::regex_search(msg, re);
}

int run_peer_fails(Rank& r, const Flags& f) {
  const int W = r.env.world_size, me = r.env.rank, gone = W - 1;
  const std::string mode = f.get("mode", "exit");
  const long timeout = f.get_int("timeout-ms", 2000);
  const std::string done = "ddp_worker/" + f.get("tag", "t") + "/done/";
  auto cfg = r.config(f);
  cfg.options = {{"broadcast_buffers", "false"}};  // the first collective after setup is a gradient bucket's
  ddptest::Strategy st(*r.rt, "ddp", cfg);
  Model m(ddptest::standard_specs());
  init_rank_values(m, me);
  st.setup(m.params());
  if (me == gone) {
    std::cout << r.tag() << (mode == "exit" ? "exiting" : "staying idle") << " instead of the first step" << std::endl;
    if (mode == "exit") ::_exit(0);  // as a crash would: no teardown
    std::vector<std::string> keys;
    for (int q = 0; q < gone; ++q) keys.push_back(done + std::to_string(q));
    r.store->wait(keys, std::chrono::milliseconds(timeout + 30000));
    return 0;
  }
  const auto t0 = Clock::now();
  try {
    st.run_step([&](PL_Device, PL_Parameter*, size_t) {
      for (size_t i = m.size(); i-- > 0;)
        if (m.spec(i).requires_grad) st.on_grad_ready(i);
    });
    st.after_backward();
    r.expect(false, "after_backward succeeded although rank " + std::to_string(gone) + " never took part");
  } catch (const pl::Error& e) {
    const long took =
        static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
    const std::string msg = e.what();
    std::cout << r.tag() << "error after " << took << " ms (code " << e.code() << "): " << msg << std::endl;
    r.expect(msg.find("ddp: the gradient allreduce of bucket") == 0, "the message does not say which bucket failed");
    r.expect(msg.find("gloo allreduce #") != std::string::npos, "the message does not carry the process group's");
    r.expect(names_rank(msg, gone), "the message does not name rank " + std::to_string(gone));
    if (mode == "stall")
      r.expect(e.code() == PL_ERR_TIMEOUT, "expected PL_ERR_TIMEOUT, got code " + std::to_string(e.code()));
    r.expect(took <= timeout + 10000, "the error came only after " + std::to_string(took) + " ms");
  }
  if (mode == "stall") r.store->set(done + std::to_string(me), "1");
  try {
    st.teardown();  // bounded although the group failed
  } catch (const pl::Error& e) {
    r.expect(false, std::string("teardown after the failure threw: ") + e.what());
  }
  if (!r.failed) std::cout << r.tag() << "peer-fails: OK" << std::endl;
  return r.failed ? 1 : 0;
}

int main_impl(int argc, char** argv) {
  Rank r;
  Flags f;
  try {
    f = parse(argc, argv);
    r.env = pl::DistEnv::from_env();
    const char* level = std::getenv("PL_LOG_LEVEL");
    r.rt = std::make_unique<pl::Runtime>(ddptest::runtime_options(level && *level ? level : "warn"));
    r.acc = pl::Accelerator(*r.rt, "cpu");
  } catch (const std::exception& e) {
    std::cout << "ddp_worker: " << e.what() << std::endl;
    return 2;
  }
  try {
    if (r.env.world_size > 1)
      r.store = std::make_unique<pl::Store>(*r.rt, r.env.store_options(std::chrono::milliseconds(30000)));
    if (f.scenario == "train") return run_train(r, f);
    if (f.scenario == "peer-fails") return run_peer_fails(r, f);
    std::cout << "ddp_worker: unknown scenario '" << f.scenario << "' (train, peer-fails)" << std::endl;
    return 2;
  } catch (const pl::Error& e) {
    std::cout << r.tag() << "ERROR (code " << e.code() << "): " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cout << r.tag() << "ERROR: " << e.what() << std::endl;
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) { return main_impl(argc, argv); }
