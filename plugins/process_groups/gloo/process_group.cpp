// The gloo process-group plugin: create (options, the tcp device, the rendezvous through the
// group's store, the core), destroy, set_timeout, abort, and the plugin's table and descriptor.
//
// Devices: a group made for the cpu (config->device cpu) takes CPU tensors.  A group made for a
// device (e.g. cuda:0) with an accelerator (config->accelerator_api, config->accelerator, which
// must outlive the group) also takes tensors on that device and stages them through page-locked
// host memory (staging.hpp); without an accelerator such a group is refused at create.
//
// Options (PL_ProcessGroupConfig.options):
//   iface      the network interface to listen on            (see transport.hpp for the default)
//   hostname   the address or host name to listen on
//   probe_ms   after how long a running collective publishes its state to check for mismatched
//              calls; default 1000, capped at a quarter of the timeout; 0 disables the probes
//   allreduce  ring, bcube or auto (default): gloo's allreduce algorithm.  auto takes bcube
//              (recursive halving-doubling) for a power-of-two world below 128 MiB, where it needs
//              log2(W) exchanges instead of ring's 2(W-1) steps (measured on loopback at 2 ranks
//              and 800 KB: 1.75 ms against 2.1-2.4 ms; 3-7% faster at 16-64 MiB), and ring
//              otherwise: from 128 MiB ring's pipelined 1 MiB segments, which overlap transfer and
//              reduction, beat bcube's 16 MiB pieces by 3-5% (2 ranks, medians of seven
//              interleaved sweeps: bench/README.md)
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <plrt/pl_plugin.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "gloo_pg.hpp"
#include "gloo_store.hpp"
#include "transport.hpp"

namespace plrt::gloo_pg {

using plugin::fail;
using std::chrono::milliseconds;

namespace {

// Gloo writes to its sockets without MSG_NOSIGNAL, so a peer that exits would kill this process
// with SIGPIPE instead of failing the collective with an error that names it.  Like Python (and
// so PyTorch), ignore SIGPIPE, but only while it has its default action: a handler the host
// program installed is left alone.
void ignore_sigpipe(const PL_Host* host) {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (sigaction(SIGPIPE, &ignore, nullptr) == 0)
    plugin::logf(host, PL_LOG_DEBUG, kBackend,
                 "SIGPIPE is now ignored in this process: a peer that exits is reported as an error");
}

// After a failed rendezvous: the ranks whose addresses never reached the store.
std::string absent_ranks(const GlooStore& gs, const pg::StoreClient& store, int world, int self) {
  std::vector<int> absent;
  try {
    for (int r = 0; r < world; ++r)
      if (r != self && !store.exists(gs.join(std::to_string(r)))) absent.push_back(r);
  } catch (const std::exception&) {
    return "";
  }
  if (absent.empty()) return "";
  return std::string(absent.size() == 1 ? " (rank " : " (ranks ") + pg::rank_list(absent) + " never joined)";
}

PL_Error* pg_create(const PL_Host* host, const PL_ProcessGroupConfig* config, PL_ProcessGroup** out) {
  if (host == nullptr) pg::broken_call(kBackend, "create (host)");
  return plugin::guard(host, [&] {
    if (out == nullptr) fail(PL_ERR_INVALID_ARGUMENT, "gloo: create: out is NULL");
    *out = nullptr;
    pg::check_group_config(kBackend, host, config);
    const auto opts = pg::parse_options(kBackend, config->options, {"iface", "hostname", "allreduce"});
    const pg::CoreConfig cc = pg::core_config(kBackend, host, *config, opts);
    auto pg = std::make_unique<PL_ProcessGroup>();
    pg->staging = Staging::create(host, *config);  // before the store: a bad device fails alone
    if (config->world_size > 1) ignore_sigpipe(host);
    pg->host = host;
    pg->rank = config->rank;
    pg->world = config->world_size;
    pg->name = cc.group;
    const int64_t timeout = cc.timeout_ms;
    pg->core = std::make_unique<pg::GroupCore>(cc);

    const std::string who =
        "gloo: group '" + pg->name + "' rank " + std::to_string(pg->rank) + " of " + std::to_string(pg->world);
    const auto opt = [&](const char* k) {
      auto it = opts.find(k);
      return it == opts.end() ? std::string() : it->second;
    };
    const std::string algo = opt("allreduce");
    if (!algo.empty() && algo != "auto" && algo != "ring" && algo != "bcube")
      fail(PL_ERR_INVALID_ARGUMENT, "gloo: option allreduce='" + algo + "' is not valid: use ring, bcube or auto");
    pg->allreduce = algo == "ring"    ? PL_ProcessGroup::Algorithm::kRing
                    : algo == "bcube" ? PL_ProcessGroup::Algorithm::kBcube
                                      : PL_ProcessGroup::Algorithm::kAuto;
    if (pg->world > 1) {
      const Endpoint ep = choose_endpoint(opt("iface"), opt("hostname"));
      pg->address = ep.description;
      try {
        pg->device = gloo::transport::tcp::CreateDevice(ep.attr);
      } catch (const std::exception& e) {
        fail(PL_ERR_INVALID_ARGUMENT, who + ": cannot listen on " + ep.description + ": " + e.what());
      }
      auto ctx = std::make_shared<gloo::rendezvous::Context>(pg->rank, pg->world);
      ctx->setTimeout(milliseconds(timeout));
      GlooStore gs(pg->core->store(), pg->core->key_prefix() + "/gloo", milliseconds(timeout));
      try {
        ctx->connectFullMesh(gs, pg->device);
      } catch (const plugin::Failure& f) {
        fail(f.code, who + ": the rendezvous through the store failed" +
                         absent_ranks(gs, pg->core->store(), pg->world, pg->rank) + ": " + f.message);
      } catch (const std::exception& e) {
        fail(PL_ERR_RUNTIME, who + ": connecting to the peers over " + ep.description + " failed: " + e.what());
      }
      pg->context = ctx;
    } else {
      pg->address = "no transport (a single rank)";
    }
    PL_ProcessGroup* raw = pg.get();
    pg->core->start(pg->world > 1
                        ? pg::AbortTransport([raw](const std::string& reason) { abort_pairs(*raw->context, reason); })
                        : pg::AbortTransport());
    plugin::logf(host, PL_LOG_DEBUG, kBackend, "group '%s': rank %d of %d connected over %s (timeout %lld ms)%s%s",
                 pg->name.c_str(), pg->rank, pg->world, pg->address.c_str(), static_cast<long long>(timeout),
                 pg->staging ? "; staging through host memory: " : "",
                 pg->staging ? pg->staging->device_name().c_str() : "");
    *out = pg.release();
  });
}

void pg_destroy(PL_ProcessGroup* pg) {
  if (pg == nullptr) return;
  try {
    pg->core->shutdown();  // runs what is queued; no transport abort after this
    pg->context.reset();   // closes the pairs
    pg->device.reset();
    if (pg->staging) pg->staging->pool().free_all();  // no op holds a block once the core has stopped
  } catch (...) {
  }
  delete pg;
}

PLRT_PROCESS_GROUP_PLUGIN("gloo", "0.1.0",
                          "CPU collectives over Gloo's tcp transport (device tensors staged through host memory), "
                          "with mismatch detection and bounded waits");

}  // namespace

}  // namespace plrt::gloo_pg

PL_DEFINE_PLUGIN(plrt::gloo_pg::kPlugin)
