// Shared by the ddp and dp test harnesses (ddp_harness.hpp, dp_harness.hpp): a runtime that sees the
// build tree's plugins only, and one strategy instance driven through its plugin's C table, every
// call throwing pl::Error.  Each family's harness adds its own run_step (the step functions' shapes
// differ).  No GoogleTest here: ddp_worker uses it too.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace strattest {

// A runtime that sees the build tree's plugins only.
inline pl::RuntimeOptions runtime_options(const std::string& log_level = "warn") {
  pl::RuntimeOptions o;
  o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  o.use_env_dirs = false;
  o.use_default_dirs = false;
  o.log_level = log_level;
  return o;
}

// A store client of the test's server at 127.0.0.1:port.
inline pl::StoreOptions store_client(int port, const std::string& token) {
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.token = token;
  so.timeout = std::chrono::seconds(20);
  return so;
}

// Gloo's way of testing a job in one process: serves a store, runs rank_main(rank, port) on one
// thread per rank, and returns each rank's failure ("" when it returned normally).
inline std::vector<std::string> run_ranks(int world, const std::string& token,
                                          const std::function<void(int rank, int port)>& rank_main) {
  pl::Runtime server_rt(runtime_options());
  pl::StoreOptions so = store_client(0, token);
  so.is_server = true;
  pl::Store server(server_rt, so);
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        rank_main(r, server.port());
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return failures;
}

struct Config {
  int rank = 0, world = 1;
  int local_rank = 0;  // Layout::kOneNode only
  // Layout::kOneNode only: the ranks split into this many nodes of world/num_nodes consecutive
  // ranks each (node rank = rank / (world/num_nodes)); local_rank must be the rank in its node.
  int num_nodes = 1;
  int local_world = 0;          // Layout::kOneNode, when > 0: this rank's node size instead (unequal nodes)
  int node_rank = -1;           // Layout::kOneNode, when >= 0: this rank's node instead
  pl::Accelerator accelerator;  // empty: no accelerator in the config
  std::vector<int32_t> device_ids{0};
  std::string backend = "gloo";
  PL_Store* store = nullptr;
  int64_t timeout_ms = 0;
  std::vector<std::pair<std::string, std::string>> options;  // after the plugin alias's presets
};

// Where the job's processes run, which PL_StrategyConfig's local and node fields say.
enum class Layout {
  kOneNode,         // ddp: every rank a process on one node
  kProcessPerNode,  // dp, ddp2: one process per node, driving all its devices
};

// One strategy instance, created through PL_StrategyApi; every call throws pl::Error.
class Strategy {
 public:
  Strategy(const pl::Runtime& rt, const std::string& name, const Config& c, Layout layout) : host_(rt.host()) {
    ref_ = rt.find(PL_PLUGIN_STRATEGY, name);
    api_ = ref_.api<PL_StrategyApi>();
    std::vector<PL_Option> items;
    for (const auto& kv : ref_.presets) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    for (const auto& kv : c.options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    PL_StrategyConfig sc{};
    sc.struct_size = sizeof sc;
    sc.global_rank = c.rank;
    sc.world_size = c.world;
    if (layout == Layout::kOneNode) {
      // One node: the node is the job (whatever c.world says, bad values included).
      const int per_node = c.num_nodes > 1 ? std::max(1, c.world / c.num_nodes) : c.world;
      sc.local_rank = c.local_rank;
      sc.local_world_size = c.local_world > 0 ? c.local_world : per_node;
      sc.node_rank = c.node_rank >= 0 ? c.node_rank : (c.num_nodes > 1 ? c.rank / per_node : 0);
      sc.num_nodes = std::max(1, c.num_nodes);
    } else {
      sc.local_rank = 0;
      sc.local_world_size = 1;
      sc.node_rank = c.rank;
      sc.num_nodes = c.world;
    }
    sc.accelerator_api = c.accelerator.defined() ? c.accelerator.api() : nullptr;
    sc.accelerator = c.accelerator.defined() ? c.accelerator.get() : nullptr;
    sc.device_ids = c.device_ids.data();
    sc.num_devices = c.device_ids.size();
    sc.process_group_backend = c.backend.c_str();
    sc.store = c.store;
    sc.timeout_ms = c.timeout_ms;
    sc.options = {sizeof(PL_OptionList), items.data(), items.size()};
    pl::check(host_, api_->create(host_, &sc, &s_));
  }
  ~Strategy() {
    if (s_) api_->destroy(s_);
  }
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const PL_StrategyApi* api() const { return api_; }
  PL_Strategy* get() const { return s_; }

  void setup(std::vector<PL_Parameter>& params) { pl::check(host_, api_->setup(s_, params.data(), params.size())); }
  void on_grad_ready(size_t i) { pl::check(host_, api_->on_grad_ready(s_, i)); }
  void after_backward() { pl::check(host_, api_->after_backward(s_)); }
  void after_optimizer_step() { pl::check(host_, api_->after_optimizer_step(s_)); }
  void set_grad_sync(bool on) { pl::check(host_, api_->set_grad_sync(s_, on ? 1 : 0)); }
  void teardown() { pl::check(host_, api_->teardown(s_)); }
  double stat(const std::string& name) {
    double v = -1;
    pl::check(host_, api_->get_stat(s_, name.c_str(), &v));
    return v;
  }
  std::pair<const PL_ProcessGroupApi*, PL_ProcessGroup*> process_group() {
    const PL_ProcessGroupApi* a = nullptr;
    PL_ProcessGroup* g = nullptr;
    pl::check(host_, api_->process_group(s_, &a, &g));
    return {a, g};
  }
  // ABI 1.3: strategies with several replicas per process.
  int num_replicas() {
    int32_t n = -1;
    pl::check(host_, api_->num_replicas(s_, &n));
    return n;
  }
  void setup_replica(int r, std::vector<PL_Parameter>& params) {
    pl::check(host_, api_->setup_replica(s_, r, params.data(), params.size()));
  }
  // ABI 1.4.
  void reduce(PL_Tensor& t, PL_ReduceOp op) { pl::check(host_, api_->reduce(s_, &t, op)); }
  void all_gather(const PL_Tensor& in, std::vector<PL_Tensor>& outs) {
    pl::check(host_, api_->all_gather(s_, &in, outs.data(), outs.size()));
  }
  bool agree_skip(bool found_inf) {
    int32_t skip = -1;
    pl::check(host_, api_->agree_skip(s_, found_inf ? 1 : 0, &skip));
    return skip != 0;
  }
  // The ranges optimizer_step hands the host's optimizer (each call's, in order).
  std::vector<std::vector<PL_ParamRange>> optimizer_step() {
    std::vector<std::vector<PL_ParamRange>> calls;
    PL_OptimizerFn fn{};
    fn.struct_size = sizeof fn;
    fn.user = &calls;
    fn.step = [](void* user, const PL_ParamRange* r, size_t n) -> PL_Error* {
      static_cast<std::vector<std::vector<PL_ParamRange>>*>(user)->emplace_back(r, r + n);
      return nullptr;
    };
    pl::check(host_, api_->optimizer_step(s_, &fn));
    return calls;
  }

 protected:
  const PL_Host* host_;
  pl::PluginRef ref_;
  const PL_StrategyApi* api_ = nullptr;
  PL_Strategy* s_ = nullptr;
};

}  // namespace strattest
