// Ranks as threads (gloo_threads.hpp's habit) whose gloo groups are made for a device and stage
// its tensors through host memory: each rank thread has its own runtime, store client, accelerator
// instance and group, all on cuda:0 (several ranks on one GPU, which gloo allows and nccl does
// not).  The device is the cuda accelerator plugin where there is a GPU, or the emulated device
// (emulated_device.hpp) anywhere.  pl::ProcessGroupOptions has no accelerator, so the group is
// made through the plugin's C table here.
#pragma once

#include <functional>
#include <memory>
#include <plrt/sdk/accelerator.hpp>
#include <string>
#include <vector>

#include "emulated_device.hpp"
#include "gloo_threads.hpp"

namespace staged {

using namespace std::chrono_literals;
using gloo_threads::Buf;

enum class Kind {
  kEmulated,
  kCuda
};
inline const char* kind_name(Kind k) { return k == Kind::kCuda ? "cuda" : "emulated"; }

// "" when the cuda accelerator plugin is built and sees a GPU; otherwise why not.
std::string cuda_unavailable();

// A rank's device: the accelerator its group stages through, and the test's own access to device
// memory (a per-rank arena, reset between cases).
class RankDevice {
 public:
  virtual ~RankDevice() = default;
  const PL_AcceleratorApi* api = nullptr;
  PL_Accelerator* acc = nullptr;
  PL_Device device{PL_DEVICE_CUDA, 0};

  void* alloc(size_t bytes);  // from the arena, 256-byte aligned
  void reset() { used_ = 0; }
  virtual void upload(void* dev, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* dev, size_t bytes) = 0;

 protected:
  uint8_t* arena_ = nullptr;
  size_t size_ = 0, used_ = 0;
};

std::unique_ptr<RankDevice> make_device(Kind kind, pl::Runtime& rt, emulated::Device* emu, size_t arena_bytes);

// Device memory for n elements of dt, with a host mirror (a gloo_threads::Buf).
struct DevBuf {
  DevBuf(RankDevice& d, PL_DType dt, size_t n)
      : dev(d), host(dt, n), ptr(d.alloc(std::max<size_t>(n, 1) * pl_dtype_size(dt))) {}
  PL_Tensor tensor() { return tensor_at(0, host.n); }
  PL_Tensor tensor_at(size_t first, size_t count) {
    return pl::tensor_view(static_cast<uint8_t*>(ptr) + first * pl_dtype_size(host.dt), host.dt,
                           static_cast<int64_t>(count), dev.device);
  }
  void upload() { dev.upload(ptr, host.bytes.data(), host.bytes.size()); }
  const Buf& download() {
    dev.download(host.bytes.data(), ptr, host.bytes.size());
    return host;
  }
  RankDevice& dev;
  Buf host;
  void* ptr;
};

// A gloo group through the plugin's C table, with the accelerator in its config.
class Group {
 public:
  Group(const pl::Runtime& rt, const pl::Store& store, int rank, int world, PL_Device device,
        const PL_AcceleratorApi* acc_api, PL_Accelerator* acc, const std::string& name,
        std::chrono::milliseconds timeout);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  void allreduce(PL_Tensor t, PL_ReduceOp op) {
    call([&](PL_Work** w) { return api_->allreduce(pg_, &t, op, w); });
  }
  pl::Work allreduce_async(PL_Tensor t, PL_ReduceOp op) {
    return start([&](PL_Work** w) { return api_->allreduce(pg_, &t, op, w); });
  }
  void broadcast(PL_Tensor t, int root) {
    call([&](PL_Work** w) { return api_->broadcast(pg_, &t, root, w); });
  }
  void allgather(PL_Tensor in, std::vector<PL_Tensor> outs) {
    call([&](PL_Work** w) { return api_->allgather(pg_, &in, outs.data(), outs.size(), w); });
  }
  void reduce_scatter(std::vector<PL_Tensor> ins, PL_Tensor out, PL_ReduceOp op) {
    call([&](PL_Work** w) { return api_->reduce_scatter(pg_, ins.data(), ins.size(), &out, op, w); });
  }
  // Empty counts: NULL (equal chunks).
  void all_to_all(PL_Tensor in, PL_Tensor out, std::vector<int64_t> in_counts = {},
                  std::vector<int64_t> out_counts = {}) {
    call([&](PL_Work** w) {
      return api_->all_to_all(pg_, &in, in_counts.empty() ? nullptr : in_counts.data(), &out,
                              out_counts.empty() ? nullptr : out_counts.data(), w);
    });
  }
  void send(PL_Tensor t, int dst, int tag) {
    call([&](PL_Work** w) { return api_->send(pg_, &t, dst, tag, w); });
  }
  pl::Work send_async(PL_Tensor t, int dst, int tag) {
    return start([&](PL_Work** w) { return api_->send(pg_, &t, dst, tag, w); });
  }
  void recv(PL_Tensor t, int src, int tag) {
    call([&](PL_Work** w) { return api_->recv(pg_, &t, src, tag, w); });
  }
  pl::Work recv_async(PL_Tensor t, int src, int tag) {
    return start([&](PL_Work** w) { return api_->recv(pg_, &t, src, tag, w); });
  }
  void barrier() {
    call([&](PL_Work** w) { return api_->barrier(pg_, w); });
  }

 private:
  template <class F>
  void call(F&& f) {
    pl::check(host_, f(nullptr));
  }  // ABI 1.1: NULL out = blocking
  template <class F>
  pl::Work start(F&& f) {
    PL_Work* w = nullptr;
    pl::check(host_, f(&w));
    return pl::Work(host_, api_, w);
  }
  const PL_Host* host_;
  const PL_ProcessGroupApi* api_;
  PL_ProcessGroup* pg_ = nullptr;
};

// What a rank thread gets.
struct Rank {
  int rank = 0, world = 1;
  pl::Runtime* rt = nullptr;
  pl::Store* store = nullptr;
  RankDevice* dev = nullptr;
  Group* pg = nullptr;
};

// W rank threads on one device kind; the emulated device (when used) is shared by every rank.
class Job {
 public:
  Job(int world, Kind kind, emulated::Device* emu = nullptr) : job_(world), kind_(kind), emu_(emu) {}
  // Runs body(rank) on one thread per rank, each with its device and group; an exception in a
  // rank thread fails the test.
  void run(const std::function<void(Rank&)>& body, size_t arena_bytes = size_t{128} << 20,
           const std::string& group = "staged");
  pl::StoreOptions client_options() const { return job_.client_options(); }

 private:
  gloo_threads::Job job_;  // serves the store
  Kind kind_;
  emulated::Device* emu_;
};

}  // namespace staged
