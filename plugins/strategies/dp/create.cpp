// create: the config's checks, the options, and (ddp2) the inner ddp instance that owns the process
// group.  The group is made by plrt_ddp_core's create, found by name through the host as ddp does.
#include <set>
#include <utility>

#include "config_checks.hpp"
#include "dp_strategy.hpp"

namespace plrt::dp {

using plugin::fail;

namespace {

// The options ddp2 accepts (dp takes none); all go to the inner ddp, which checks their values.
constexpr const char* kDdp2Options = "bucket_cap_mb, pg.<name> (passed to the process group, e.g. pg.probe_ms)";

void check_config(const std::string& who, bool across_processes, const PL_StrategyConfig* c) {
  strategy::check_config_basics(who, c);
  if (!across_processes && c->world_size > 1)
    fail(PL_ERR_INVALID_ARGUMENT, "strategy '" + who + "' runs in one process on one node (world_size=" +
                                      std::to_string(c->world_size) + "); use 'ddp2' for several nodes or 'ddp'");
  if (c->num_devices < 1)
    fail(PL_ERR_INVALID_ARGUMENT, who +
                                      ": num_devices is 0: name the devices this process drives in device_ids "
                                      "(one replica per device; at least 1)");
  if (c->device_ids == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT,
         who + ": num_devices is " + std::to_string(c->num_devices) + " but device_ids is NULL");
  if (c->num_devices > 4096)
    fail(PL_ERR_INVALID_ARGUMENT,
         who + ": num_devices " + std::to_string(c->num_devices) + " is not valid: at most 4096 replicas per process");
  std::set<int32_t> seen;
  for (size_t r = 0; r < c->num_devices; ++r) {
    const int32_t d = c->device_ids[r];
    if (d < 0)
      fail(PL_ERR_INVALID_ARGUMENT,
           who + ": device_ids[" + std::to_string(r) + "] is " + std::to_string(d) + ": a device index must be >= 0");
    if (!seen.insert(d).second)
      fail(PL_ERR_INVALID_ARGUMENT, who + ": device " + std::to_string(d) + " appears twice in device_ids (at " +
                                        std::to_string(r) + "): each replica needs a device of its own");
  }
}

// Several replicas are copied and summed through the accelerator: it must be there, with the
// entries used.
void check_accelerator(const std::string& who, const PL_StrategyConfig* c) {
  const PL_AcceleratorApi* a = c->accelerator_api;
  if (a == nullptr || c->accelerator == nullptr) {
    if (c->num_devices == 1) return;  // one replica: nothing to copy or sum
    fail(PL_ERR_INVALID_ARGUMENT, who + ": config->accelerator_api and config->accelerator are required for " +
                                      std::to_string(c->num_devices) +
                                      " replicas (their values are copied and their gradients summed on the "
                                      "accelerator)");
  }
  strategy::check_accelerator_table(who, a);
  if (c->num_devices == 1) return;
  std::string missing;
  auto need = [&](bool present, const char* name) {
    if (!present) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  const bool has_axpy = a->struct_size >= PL_STRUCT_SIZE(PL_AcceleratorApi, axpy);
  need(a->struct_size >= PL_STRUCT_SIZE(PL_AcceleratorApi, copy) && a->copy != nullptr, "copy");
  need(has_axpy && a->axpy != nullptr, "axpy");
  if (!(a->flags & PL_ACCEL_SYNCHRONOUS)) need(has_axpy && a->stream_synchronize != nullptr, "stream_synchronize");
  if (a->device_type != PL_DEVICE_CPU) need(a->alloc != nullptr && a->free_memory != nullptr, "alloc/free_memory");
  if (!missing.empty())
    fail(PL_ERR_UNSUPPORTED, who + ": the accelerator lacks " + missing + ", which " + who + " needs to drive " +
                                 std::to_string(c->num_devices) + " replicas");
}

}  // namespace

OptionPairs parse_options(const std::string& who, bool across_processes, const PL_OptionList& list) {
  OptionPairs out;
  std::vector<PL_Option> items;
  strategy::for_each_option(who, list, [&](const std::string& key, const std::string& value) {
    if (!across_processes)
      fail(PL_ERR_INVALID_ARGUMENT,
           who + ": unknown option '" + key + "'; strategy '" + who + "' takes no options (valid options: none)");
    if (key != "bucket_cap_mb" && key.rfind("pg.", 0) != 0)
      fail(PL_ERR_INVALID_ARGUMENT, who + ": unknown option '" + key + "'; valid options: " + kDdp2Options);
    out.emplace_back(key, value);
  });
  // Their values, as the inner ddp will read them.
  for (const auto& [key, value] : out) items.push_back({sizeof(PL_Option), key.c_str(), value.c_str()});
  if (!out.empty()) ddp::parse_options(who, {sizeof(PL_OptionList), items.data(), items.size()});
  return out;
}

namespace {

// ddp2's cross-process part: a ddp instance on the root's device.  It sees the user's options,
// then two of ours: no per-step buffer broadcast (the replicas take the root's buffers from the
// local copy), and a first bucket as large as the others (nothing overlaps with backward here).
void create_inner(DpStrategy& s, const PL_StrategyConfig* c, const OptionPairs& user) {
  std::string cap = "25";  // ddp's default bucket_cap_mb
  std::vector<PL_Option> items;
  for (const auto& kv : user) {
    items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
    if (kv.first == "bucket_cap_mb") cap = kv.second;
  }
  items.push_back({sizeof(PL_Option), "broadcast_buffers", "false"});
  items.push_back({sizeof(PL_Option), "first_bucket_cap_mb", cap.c_str()});
  PL_StrategyConfig ic = *c;
  ic.struct_size = sizeof ic;
  ic.device_ids = &s.device_ids[0];
  ic.num_devices = 1;
  ic.options = {sizeof(PL_OptionList), items.data(), items.size()};
  // The literal is static, as ddp requires of its name: it begins the inner's messages and logs.
  s.inner = ddp::create_strategy("ddp2", s.host, &ic);
}

}  // namespace

std::unique_ptr<DpStrategy> create_strategy(const char* who_c, bool across_processes, const PL_Host* host,
                                            const PL_StrategyConfig* c) {
  const std::string who = who_c;
  check_config(who, across_processes, c);
  check_accelerator(who, c);
  const OptionPairs options = parse_options(who, across_processes, c->options);
  auto s = std::make_unique<DpStrategy>();
  s->host = host;
  s->who = who;
  s->across_processes = across_processes;
  s->rank = c->global_rank;
  s->world = c->world_size;
  s->device_ids.assign(c->device_ids, c->device_ids + c->num_devices);
  if (c->accelerator_api != nullptr && c->accelerator != nullptr) {
    s->api = c->accelerator_api;
    s->acc = c->accelerator;
    s->device_type = s->api->device_type;
    s->synchronous = (s->api->flags & PL_ACCEL_SYNCHRONOUS) != 0;
  }
  s->dev = strategy::DeviceContext{host, who_c, s->api, s->acc, s->device_of(0)};
  if (across_processes) create_inner(*s, c, options);
  plugin::logf(host, PL_LOG_DEBUG, who_c, "rank %d of %d: %zu replica(s) on %s device(s) starting at %d%s", s->rank,
               s->world, s->n(), s->device_type == PL_DEVICE_CPU ? "cpu" : "accelerator", s->device_ids[0],
               across_processes ? (s->world > 1 ? "; gradients averaged across processes" : "; one process") : "");
  return s;
}

DpStrategy::~DpStrategy() {
  pool.stop();
  free_scratch(*this);
  inner.reset();  // its reducer drains (bounded) and frees its buffers before its groups go
}

std::string device_type_name(PL_DeviceType t) {
  return t == PL_DEVICE_CPU ? "cpu" : t == PL_DEVICE_CUDA ? "cuda" : "device type " + std::to_string(t);
}

std::string device_name(PL_Device d) { return device_type_name(d.type) + ":" + std::to_string(d.index); }

}  // namespace plrt::dp
