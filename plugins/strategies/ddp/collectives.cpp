// The ABI 1.4 entries that communicate outside the gradient buckets: reduce and all_gather (the
// trainer's metrics) and agree_skip (the loss scaler's verdict).
//
// ORDER.  Bucket collectives start from on_grad_ready as gradients become ready, which need not
// happen at the same point of the program on every rank (a rank whose gradients came in another
// order has started fewer buckets when it logs a value).  A metric reduction issued on the buckets'
// group could then take another sequence number on each rank: a mismatch.  So these run on a group
// of their own, `metrics` ("<group>.metrics" in the store), made at the first call; every rank makes
// it at the same point because every rank calls the first reduction.  Its cost: one more set of
// connections (gloo: a full mesh) and one rendezvous, once per job.
#include <cstring>
#include <memory>
#include <vector>

#include "strategy.hpp"

namespace plrt::ddp {

using plugin::fail;

namespace {

const strategy::Group& metrics_group(DdpStrategy& s) {
  std::lock_guard<std::mutex> lock(s.m);
  if (!s.metrics) {
    strategy::GroupSpec spec = s.group_spec;
    spec.name += ".metrics";
    spec.needs = {"allreduce", "allgather"};
    s.metrics = strategy::Group(s.host, spec);
  }
  return s.metrics;
}

size_t bytes_of(const PL_Tensor& t) { return static_cast<size_t>(t.numel) * pl_dtype_size(t.dtype); }

// dst = src (same dtype and numel), through the accelerator unless both are host memory.
void copy_tensor(const DdpStrategy& s, PL_Tensor& dst, const PL_Tensor& src, const std::string& what) {
  if (dst.device.type == PL_DEVICE_CPU && src.device.type == PL_DEVICE_CPU) {
    if (bytes_of(src) > 0) std::memmove(dst.data, src.data, bytes_of(src));
    return;
  }
  if (s.dev.api == nullptr) fail(PL_ERR_INVALID_ARGUMENT, what + ": a device tensor but no accelerator to copy it");
  s.dev.copy(dst.data, dst.device, src.data, src.device, bytes_of(src), what);
}

// The group takes tensors on its own device: host memory is staged through a device copy when the
// strategy's device is not the host (nccl refuses host memory; the trainer's metrics are host
// values).
struct OnGroupDevice {
  OnGroupDevice(const DdpStrategy& s, PL_Tensor& user, const std::string& what) : s_(s), user_(user), what_(what) {
    if (s.dev.device.type == PL_DEVICE_CPU || user.device.type != PL_DEVICE_CPU) {
      t = user;
      return;
    }
    mem_ = strategy::DeviceMemory(s.dev, bytes_of(user), what + ": allocating a staging buffer");
    t = user;
    t.data = mem_.get();
    t.device = s.dev.device;
    copy_tensor(s, t, user, what + ": staging to the device");
  }
  void copy_back() {
    if (mem_.get() != nullptr) copy_tensor(s_, user_, t, what_ + ": staging back to host memory");
  }
  PL_Tensor t{};

 private:
  const DdpStrategy& s_;
  PL_Tensor& user_;
  std::string what_;
  strategy::DeviceMemory mem_;
};

}  // namespace

void reduce(DdpStrategy& s, PL_Tensor& t, PL_ReduceOp op) {
  plugin::check_tensor(&t, (s.who + ": reduce: tensor").c_str());
  if (op < PL_REDUCE_SUM || op > PL_REDUCE_PRODUCT)
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": reduce: op " + std::to_string(op) +
                                      " is not valid (PL_REDUCE_SUM 1, AVG 2, MIN 3, MAX 4, PRODUCT 5)");
  if (s.world == 1) return;  // the reduction over one process is its own value
  const std::string what = s.who + ": reduce (a metric's reduction across ranks)";
  OnGroupDevice g(s, t, what);
  metrics_group(s).allreduce(g.t, op, what);
  g.copy_back();
}

void all_gather(DdpStrategy& s, const PL_Tensor& in, PL_Tensor* outs, size_t n) {
  plugin::check_tensor(&in, (s.who + ": all_gather: input").c_str());
  if (outs == nullptr || n != static_cast<size_t>(s.world))
    fail(PL_ERR_INVALID_ARGUMENT, s.who + ": all_gather: num_outputs is " + std::to_string(n) +
                                      (outs == nullptr ? " with outputs NULL" : "") + " but the world size is " +
                                      std::to_string(s.world) + ": one output per rank");
  if (s.world == 1) {
    plugin::check_tensor(&outs[0], (s.who + ": all_gather: outputs[0]").c_str());
    if (outs[0].dtype != in.dtype || outs[0].numel != in.numel)
      fail(PL_ERR_INVALID_ARGUMENT, s.who + ": all_gather: outputs[0] is " + plugin::describe(outs[0]) +
                                        " but the input is " + plugin::describe(in) + " (they must match)");
    copy_tensor(s, outs[0], in, s.who + ": all_gather");
    return;
  }
  const std::string what = s.who + ": all_gather (a value gathered from every rank)";
  PL_Tensor input = in;
  OnGroupDevice gin(s, input, what);
  std::vector<std::unique_ptr<OnGroupDevice>> gouts;
  std::vector<PL_Tensor> staged;
  for (size_t r = 0; r < n; ++r) {
    plugin::check_tensor(&outs[r], (s.who + ": all_gather: outputs[" + std::to_string(r) + "]").c_str());
    gouts.push_back(std::make_unique<OnGroupDevice>(s, outs[r], what));
    staged.push_back(gouts.back()->t);
  }
  metrics_group(s).allgather(gin.t, staged.data(), n, what);
  for (auto& g : gouts) g->copy_back();
}

bool agree_skip(DdpStrategy& s, bool found_inf) {
  if (s.world == 1) return found_inf;
  int32_t flag = found_inf ? 1 : 0;
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = &flag;
  t.dtype = PL_I32;
  t.device = {PL_DEVICE_CPU, 0};
  t.numel = 1;
  t.ndim = 0;
  const std::string what = s.who + ": agree_skip (the loss scaler's verdict across ranks)";
  OnGroupDevice g(s, t, what);
  metrics_group(s).allreduce(g.t, PL_REDUCE_MAX, what);
  g.copy_back();
  return flag != 0;
}

}  // namespace plrt::ddp
