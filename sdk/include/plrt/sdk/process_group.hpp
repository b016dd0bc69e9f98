// pl::ProcessGroup: collectives through a process-group plugin (gloo, nccl, or a third party's),
// found by name.  Blocking calls and async ones returning a pl::Work; every wait has a timeout.
#pragma once

#include <plrt/pl_process_group.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <plrt/sdk/dtype.hpp>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl {

// A flat PL_Tensor over memory the caller owns.
inline PL_Tensor tensor_view(void* data, PL_DType dtype, int64_t numel, PL_Device device = {PL_DEVICE_CPU, 0}) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.numel = numel;
  t.ndim = 1;
  t.shape[0] = numel;
  return t;
}

template <class T>
PL_Tensor tensor_view(std::vector<T>& v) {
  return tensor_view(v.data(), dtype_of<T>(), static_cast<int64_t>(v.size()));
}

// An outstanding operation.  Destroying it waits for the operation (bounded by the timeout).
class Work {
 public:
  Work() = default;
  Work(const PL_Host* host, const PL_ProcessGroupApi* api, PL_Work* w) : host_(host), api_(api), w_(w, Deleter{api}) {}
  // Throws pl::Error (code PL_ERR_TIMEOUT on timeout); 0: the group's timeout.
  void wait(std::chrono::milliseconds timeout = {}) const { check(host_, api_->work_wait(w_.get(), timeout.count())); }
  bool test() const {
    int32_t done = 0;
    check(host_, api_->work_test(w_.get(), &done));
    return done != 0;
  }
  explicit operator bool() const { return w_ != nullptr; }
  // Keeps `owned` alive as long as the operation may read it (until this Work is destroyed).
  void keep(std::shared_ptr<void> owned) { keep_ = std::move(owned); }

 private:
  struct Deleter {
    const PL_ProcessGroupApi* api;
    void operator()(PL_Work* w) const {
      if (w) api->work_destroy(w);
    }
  };
  const PL_Host* host_ = nullptr;
  const PL_ProcessGroupApi* api_ = nullptr;
  std::shared_ptr<void> keep_;  // declared first of the two: destroyed after the work is waited for
  std::unique_ptr<PL_Work, Deleter> w_{nullptr, Deleter{nullptr}};
};

struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string group_name = "default";    // prefixes this group's store keys
  std::chrono::milliseconds timeout{0};  // 0: 30 minutes
  PL_Device device{PL_DEVICE_CPU, 0};
  std::vector<std::pair<std::string, std::string>> options;  // backend settings
};

class ProcessGroup {
 public:
  // `backend` is a plugin name ("gloo", "nccl"), an alias, or a path.  `store` must outlive it.
  ProcessGroup(const Runtime& runtime, const std::string& backend, const Store& store, const ProcessGroupOptions& o)
      : host_(runtime.host()), rank_(o.rank), world_size_(o.world_size) {
    plugin_ = runtime.find(PL_PLUGIN_PROCESS_GROUP, backend);
    api_ = plugin_.api<PL_ProcessGroupApi>();
    std::vector<PL_Option> items;
    for (const auto& kv : plugin_.presets) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    for (const auto& kv : o.options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    PL_ProcessGroupConfig c{};
    c.struct_size = sizeof c;
    c.rank = o.rank;
    c.world_size = o.world_size;
    c.store = store.get();
    c.group_name = o.group_name.c_str();
    c.timeout_ms = o.timeout.count();
    c.device = o.device;
    c.options = {sizeof(PL_OptionList), items.data(), items.size()};
    PL_ProcessGroup* pg = nullptr;
    check(host_, api_->create(host_, &c, &pg));
    pg_.reset(pg);
    pg_.get_deleter().api = api_;
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& backend() const { return plugin_.requested_name; }
  PL_ProcessGroup* get() const { return pg_.get(); }
  const PL_ProcessGroupApi* api() const { return api_; }

  // ---- blocking ----
  void allreduce(PL_Tensor& t, PL_ReduceOp op = PL_REDUCE_SUM) const {
    run([&](PL_Work** w) { return api_->allreduce(get(), &t, op, w); });
  }
  template <class T>
  void allreduce(std::vector<T>& v, PL_ReduceOp op = PL_REDUCE_SUM) const {
    auto t = tensor_view(v);
    allreduce(t, op);
  }
  void broadcast(PL_Tensor& t, int root) const {
    run([&](PL_Work** w) { return api_->broadcast(get(), &t, root, w); });
  }
  // outputs.size() == world_size; outputs[r] receives rank r's input (sizes may differ per rank).
  void allgather(const PL_Tensor& input, std::vector<PL_Tensor>& outputs) const {
    run([&](PL_Work** w) { return api_->allgather(get(), &input, outputs.data(), outputs.size(), w); });
  }
  void reduce_scatter(const std::vector<PL_Tensor>& inputs, PL_Tensor& output, PL_ReduceOp op = PL_REDUCE_SUM) const {
    run([&](PL_Work** w) { return api_->reduce_scatter(get(), inputs.data(), inputs.size(), &output, op, w); });
  }
  // As torch.distributed.all_to_all_single: chunk j of `input` goes to rank j, chunk i of `output`
  // comes from rank i.  Empty counts: equal chunks (numel / world_size).  Needs a plugin of ABI
  // >= 1.4 that has it (PL_ERR_UNSUPPORTED otherwise).
  void all_to_all(const PL_Tensor& input, PL_Tensor& output, const std::vector<int64_t>& input_counts = {},
                  const std::vector<int64_t>& output_counts = {}) const {
    const auto fn = all_to_all_fn();
    run([&](PL_Work** w) {
      return fn(get(), &input, counts_or_null(input_counts), &output, counts_or_null(output_counts), w);
    });
  }
  void barrier() const {
    run([&](PL_Work** w) { return api_->barrier(get(), w); });
  }
  void send(const PL_Tensor& t, int dst, int tag = 0) const {
    run([&](PL_Work** w) { return api_->send(get(), &t, dst, tag, w); });
  }
  void recv(PL_Tensor& t, int src, int tag = 0) const {
    run([&](PL_Work** w) { return api_->recv(get(), &t, src, tag, w); });
  }

  // ---- asynchronous: tensors stay borrowed until the Work completes ----
  Work allreduce_async(PL_Tensor& t, PL_ReduceOp op = PL_REDUCE_SUM) const {
    return start([&](PL_Work** w) { return api_->allreduce(get(), &t, op, w); });
  }
  Work broadcast_async(PL_Tensor& t, int root) const {
    return start([&](PL_Work** w) { return api_->broadcast(get(), &t, root, w); });
  }
  Work allgather_async(const PL_Tensor& input, std::vector<PL_Tensor>& outputs) const {
    return start([&](PL_Work** w) { return api_->allgather(get(), &input, outputs.data(), outputs.size(), w); });
  }
  Work reduce_scatter_async(const std::vector<PL_Tensor>& inputs, PL_Tensor& output,
                            PL_ReduceOp op = PL_REDUCE_SUM) const {
    return start(
        [&](PL_Work** w) { return api_->reduce_scatter(get(), inputs.data(), inputs.size(), &output, op, w); });
  }
  // The counts are copied into the Work (the plugin borrows them until it completes).
  Work all_to_all_async(const PL_Tensor& input, PL_Tensor& output, const std::vector<int64_t>& input_counts = {},
                        const std::vector<int64_t>& output_counts = {}) const {
    const auto fn = all_to_all_fn();
    auto counts = std::make_shared<std::vector<std::vector<int64_t>>>(
        std::vector<std::vector<int64_t>>{input_counts, output_counts});
    Work w = start([&](PL_Work** out) {
      return fn(get(), &input, counts_or_null((*counts)[0]), &output, counts_or_null((*counts)[1]), out);
    });
    w.keep(std::move(counts));
    return w;
  }
  Work barrier_async() const {
    return start([&](PL_Work** w) { return api_->barrier(get(), w); });
  }
  Work send_async(const PL_Tensor& t, int dst, int tag = 0) const {
    return start([&](PL_Work** w) { return api_->send(get(), &t, dst, tag, w); });
  }
  Work recv_async(PL_Tensor& t, int src, int tag = 0) const {
    return start([&](PL_Work** w) { return api_->recv(get(), &t, src, tag, w); });
  }

  void set_timeout(std::chrono::milliseconds timeout) const { check(host_, api_->set_timeout(get(), timeout.count())); }
  // Fails every pending and future operation; safe from any thread.
  void abort() const { check(host_, api_->abort(get())); }

 private:
  using AllToAllFn = decltype(PL_ProcessGroupApi::all_to_all);
  AllToAllFn all_to_all_fn() const {
    if (plugin_.plugin->abi_minor < 4 || !PL_HAS_FIELD(PL_ProcessGroupApi, api_, all_to_all) ||
        api_->all_to_all == nullptr)
      throw Error(PL_ERR_UNSUPPORTED, "process group '" + plugin_.requested_name +
                                          "' has no all_to_all (it needs a plugin of ABI 1.4 or later that offers it)");
    return api_->all_to_all;
  }
  static const int64_t* counts_or_null(const std::vector<int64_t>& c) { return c.empty() ? nullptr : c.data(); }

  // A plugin built for ABI >= 1.1 takes out == NULL as "block until done" (no worker hand-off);
  // an older one gets a work handle that is waited on at once.
  template <class Call>
  void run(Call&& call) const {
    if (plugin_.plugin->abi_minor >= 1) {
      check(host_, call(nullptr));
      return;
    }
    start(call).wait();
  }
  template <class Call>
  Work start(Call&& call) const {
    PL_Work* w = nullptr;
    check(host_, call(&w));
    return Work(host_, api_, w);
  }
  struct Deleter {
    const PL_ProcessGroupApi* api;
    void operator()(PL_ProcessGroup* pg) const {
      if (pg) api->destroy(pg);
    }
  };
  const PL_Host* host_;
  PluginRef plugin_;
  const PL_ProcessGroupApi* api_ = nullptr;
  int rank_, world_size_;
  std::unique_ptr<PL_ProcessGroup, Deleter> pg_{nullptr, Deleter{nullptr}};
};

// The torchrun-style environment of one worker: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT, PL_JOB_TOKEN.  Rank 0 serves the store unless PL_USE_AGENT_STORE=1 says that the
// launcher already serves it.
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;
  bool agent_store = false;

  // Throws pl::Error naming the variable and its bad value.
  static DistEnv from_env() {
    DistEnv e;
    e.rank = env_int("RANK", 0);
    e.world_size = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
    e.master_port = env_int("MASTER_PORT", -1);
    e.agent_store = env_int("PL_USE_AGENT_STORE", 0) != 0;
    if (e.world_size < 1)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  "WORLD_SIZE=" + std::to_string(e.world_size) + " is not valid: it must be >= 1");
    if (e.rank < 0 || e.rank >= e.world_size)
      throw Error(PL_ERR_INVALID_ARGUMENT, "RANK=" + std::to_string(e.rank) + " is not valid: it must be in [0, " +
                                               std::to_string(e.world_size) +
                                               ") for WORLD_SIZE=" + std::to_string(e.world_size));
    if (e.world_size > 1 && e.master_port < 0)
      throw Error(PL_ERR_INVALID_ARGUMENT, "MASTER_PORT is not set: a job of " + std::to_string(e.world_size) +
                                               " processes needs the rendezvous port (plrun sets it)");
    return e;
  }

  StoreOptions store_options(std::chrono::milliseconds timeout = {}) const {
    StoreOptions o;
    o.host = master_addr;
    o.port = master_port < 0 ? 0 : master_port;
    o.is_server = rank == 0 && !agent_store;
    o.timeout = timeout;
    return o;
  }

 private:
  static int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x < -1 || x > 1'000'000)
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string(name) + "='" + v + "' is not a valid integer");
    return static_cast<int>(x);
  }
};

}  // namespace pl
