// The nccl process-group plugin: create (device checks, the communicator through the store, the
// core), destroy, set_timeout, abort, and the plugin's table and descriptor.
//
// Options (PL_ProcessGroupConfig.options):
//   probe_ms   after how long a running collective publishes its state to check for mismatched
//              calls; default 1000, capped at a quarter of the timeout; 0 disables the probes
//
// NCCL refuses two ranks on one GPU: a world of N over nccl needs N GPUs (two processes sharing
// one GPU can use gloo with CUDA buffers staged through the host instead).  create checks it
// through the store before NCCL sees the ranks (gpu_sharing.hpp) and names the ranks that share.
#include <plrt/pl_plugin.h>

#include <cstdio>
#include <cstdlib>

#include "nccl_pg.hpp"

namespace plrt::nccl {

using plugin::fail;

namespace {

void check_config(const PL_Host* host, const PL_ProcessGroupConfig* c) {
  pg::check_group_config(kBackend, host, c);
  if (c->device.type != PL_DEVICE_CUDA)
    fail(PL_ERR_INVALID_ARGUMENT,
         "nccl: config->device has type " + std::to_string(c->device.type) +
             " (cpu), but the nccl process group runs on a CUDA device; use gloo for CPU buffers");
  std::string reason;
  const int n = visible_device_count(&reason);
  if (n == 0) fail(PL_ERR_RUNTIME, "nccl: no CUDA device is usable (" + reason + "); use the gloo backend on CPU");
  if (c->device.index < 0 || c->device.index >= n)
    fail(PL_ERR_INVALID_ARGUMENT, "nccl: config->device cuda:" + std::to_string(c->device.index) +
                                      " does not exist: this process sees " + std::to_string(n) +
                                      " CUDA device(s), cuda:0..cuda:" + std::to_string(n - 1));
}

void free_buffers(PL_ProcessGroup* pg) {
  if (pg->fp_device) cudaFree(pg->fp_device);
  if (pg->fp_host) cudaFreeHost(pg->fp_host);
  pg->fp_device = nullptr;
  pg->fp_host = nullptr;
}

PL_Error* pg_create(const PL_Host* host, const PL_ProcessGroupConfig* config, PL_ProcessGroup** out) {
  if (host == nullptr) pg::broken_call(kBackend, "create (host)");
  return plugin::guard(host, [&] {
    if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "nccl: create: out is NULL");
    *out = nullptr;
    check_config(host, config);
    const auto opts = pg::parse_options(kBackend, config->options, {});
    const pg::CoreConfig cc = pg::core_config(kBackend, host, *config, opts);
    auto pg =
        std::unique_ptr<PL_ProcessGroup, void (*)(PL_ProcessGroup*)>(new PL_ProcessGroup(), [](PL_ProcessGroup* p) {
          if (p->core) p->core->shutdown();
          p->comm.reset();
          free_buffers(p);
          delete p;
        });
    pg->host = host;
    pg->rank = config->rank;
    pg->world = config->world_size;
    pg->device = config->device.index;
    pg->name = cc.group;
    const int64_t timeout = cc.timeout_ms;
    pg->core = std::make_unique<pg::GroupCore>(cc);

    check_cuda(cudaSetDevice(pg->device), "nccl: cudaSetDevice(" + std::to_string(pg->device) + ")");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&pg->fp_device), 2 * sizeof(int64_t)), "nccl: cudaMalloc");
    check_cuda(cudaMallocHost(reinterpret_cast<void**>(&pg->fp_host), 4 * sizeof(int64_t)), "nccl: cudaMallocHost");
    try {
      pg->comm = std::make_unique<Comm>(pg->core->store(), pg->core->key_prefix() + "/nccl/", pg->rank, pg->world,
                                        pg->device, timeout);
    } catch (const plugin::Failure& f) {
      fail(f.code, "nccl: group '" + pg->name + "' rank " + std::to_string(pg->rank) + " of " +
                       std::to_string(pg->world) + ": " + f.message);
    }
    Comm* comm = pg->comm.get();
    pg->core->start([comm](const std::string& reason) { comm->abort(reason); });
    plugin::logf(host, PL_LOG_DEBUG, kBackend, "group '%s': rank %d of %d on cuda:%d (timeout %lld ms)",
                 pg->name.c_str(), pg->rank, pg->world, pg->device, static_cast<long long>(timeout));
    *out = pg.release();
  });
}

void pg_destroy(PL_ProcessGroup* pg) {
  if (pg == nullptr) return;
  try {
    pg->core->shutdown();  // runs what is queued; no transport abort after this
    pg->comm.reset();
  } catch (...) {
  }
  free_buffers(pg);
  delete pg;
}

PLRT_PROCESS_GROUP_PLUGIN(
    "nccl", "0.1.0", "CUDA collectives over NCCL, non-blocking communicators aborted on timeout, mismatch detection");

}  // namespace

}  // namespace plrt::nccl

PL_DEFINE_PLUGIN(plrt::nccl::kPlugin)
