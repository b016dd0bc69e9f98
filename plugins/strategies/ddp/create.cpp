// create: the config's checks, the options, and the process group (found by name through the host,
// never linked: the strategy plugin links to no other plugin or runtime symbol).
#include <utility>

#include "config_checks.hpp"
#include "strategy.hpp"

namespace plrt::ddp {

using plugin::fail;

namespace {

void check_config(const std::string& who, const PL_StrategyConfig* c) {
  strategy::check_config_basics(who, c);
  if (c->local_rank < 0)
    fail(PL_ERR_INVALID_ARGUMENT,
         who + ": local_rank " + std::to_string(c->local_rank) + " is not valid: it must be >= 0");
  if (c->num_devices > 1)
    fail(PL_ERR_INVALID_ARGUMENT, who + " drives one device per process but was given " +
                                      std::to_string(c->num_devices) +
                                      " (the launcher starts one process per device); use strategy 'dp' to drive "
                                      "several devices from one process");
  if (c->num_devices == 1 && c->device_ids == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": num_devices is 1 but device_ids is NULL");
  strategy::check_accelerator_table(who, c->accelerator_api);
}

// Buffers are allocated, filled and read through the accelerator: a job that communicates needs
// its memory entries.
void check_accelerator_for_buffers(const std::string& who, const PL_StrategyConfig* c) {
  const PL_AcceleratorApi* a = c->accelerator_api;
  if (a == nullptr || c->accelerator == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who +
                                      ": config->accelerator_api and config->accelerator are required when "
                                      "world_size > 1 (the gradient buckets live on the accelerator's device)");
  if (a->struct_size < PL_STRUCT_SIZE(PL_AcceleratorApi, copy) || a->alloc == nullptr || a->free_memory == nullptr ||
      a->copy == nullptr)
    fail(PL_ERR_UNSUPPORTED, who +
                                 ": the accelerator does not provide alloc, free_memory and copy, which the "
                                 "gradient buckets need");
}

PL_Device choose_device(const std::string& who, const PL_StrategyConfig* c) {
  const PL_DeviceType type = c->accelerator_api ? c->accelerator_api->device_type : PL_DEVICE_CPU;
  if (c->num_devices == 1) return PL_Device{type, c->device_ids[0]};
  // No device named: the host has one (the cpu accelerator's devices count processes); any other
  // kind needs to be told which of its devices this process drives.
  if (type == PL_DEVICE_CPU) return PL_Device{PL_DEVICE_CPU, 0};
  fail(PL_ERR_INVALID_ARGUMENT, who +
                                    ": config->num_devices is 0: name this process's device in device_ids "
                                    "(ddp drives exactly one device per process)");
}

strategy::GroupSpec group_spec(const DdpStrategy& s, const PL_StrategyConfig* c) {
  strategy::GroupSpec g;
  g.who = s.who;
  g.backend = c->process_group_backend && *c->process_group_backend
                  ? c->process_group_backend
                  : (s.dev.device.type == PL_DEVICE_CUDA ? "nccl" : "gloo");  // the runtime's default
  g.name = "ddp";
  g.rank = s.rank;
  g.world = s.world;
  g.store = c->store;
  g.timeout_ms = s.timeout_ms;
  g.device = s.dev.device;
  g.accelerator_api = c->accelerator_api;
  g.accelerator = c->accelerator;
  g.options = s.opts.pg_options;
  g.needs = {"allreduce", "broadcast"};
  return g;
}

}  // namespace

std::unique_ptr<DdpStrategy> create_strategy(const char* who_c, const PL_Host* host, const PL_StrategyConfig* c) {
  check_config(who_c, c);
  CoreSpec spec;
  spec.opts = parse_options(who_c, c->options);
  return create_strategy(who_c, host, c, spec);
}

std::unique_ptr<DdpStrategy> create_strategy(const char* who_c, const PL_Host* host, const PL_StrategyConfig* c,
                                             const CoreSpec& spec) {
  const std::string who = who_c;
  check_config(who, c);
  auto s = std::make_unique<DdpStrategy>();
  s->host = host;
  s->who = who;
  s->rank = c->global_rank;
  s->world = c->world_size;
  s->local_rank = c->local_rank;
  s->opts = spec.opts;
  s->timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : PL_DEFAULT_TIMEOUT_MS;
  s->dev.host = host;
  s->dev.source = who_c;  // static: the plugin's name
  s->dev.api = c->accelerator_api;
  s->dev.acc = c->accelerator;
  s->dev.device = choose_device(who, c);
  if (s->world > 1) {
    check_accelerator_for_buffers(who, c);
    s->group_spec = group_spec(*s, c);
    for (const auto& n : spec.extra_needs) s->group_spec.needs.push_back(n);
    s->group = strategy::Group(host, s->group_spec);
  }
  s->grads = std::make_unique<reducer::Reducer>(who, s->dev, s->group, spec.comm ? *spec.comm : s->comm);
  s->buckets = !spec.own_gradient_sync;
  plugin::logf(host, PL_LOG_DEBUG, who_c,
               "rank %d of %d (local rank %d) on device %d:%d, %s; bucket_cap_mb %g, first_bucket_cap_mb %g, "
               "broadcast_buffers %s, timeout %lld ms",
               s->rank, s->world, s->local_rank, static_cast<int>(s->dev.device.type),
               static_cast<int>(s->dev.device.index),
               s->group ? ("process group '" + s->group.backend() + "'").c_str() : "no process group (a single rank)",
               s->opts.bucket_cap_mb, s->opts.first_bucket_cap_mb, s->opts.broadcast_buffers ? "true" : "false",
               static_cast<long long>(s->timeout_ms));
  return s;
}

DdpStrategy::~DdpStrategy() {
  grads.reset();  // its buffers go back to the accelerator before the groups go
  buffer_groups.clear();
}

}  // namespace plrt::ddp
