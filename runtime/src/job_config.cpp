// Resolving a job's configuration from Lightning's knobs (what plrun --dry-run prints):
// accelerator -> devices -> strategy -> world size -> precision -> process-group backend.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "device_parser.hpp"
#include "find_usable.hpp"
#include "runtime_impl.hpp"
#include "usable_devices.hpp"

using namespace plrt::rt;

namespace {

using OptionPairs = std::vector<std::pair<std::string, std::string>>;

struct JobStorage : PL_JobConfig {
  std::string accelerator_s, strategy_s, strategy_plugin_s, backend_s, precision_s;
  std::vector<int32_t> device_ids;
  OptionPairs options;                  // strategy_options' strings
  std::vector<PL_Option> option_items;  // strategy_options' entries, pointing into `options`
};

// The alias's presets, then the request's options, in order (a later entry overrides an earlier
// one): what the strategy's launch_info and create see.
OptionPairs strategy_option_list(const PL_ResolvedPlugin& st, const PL_JobRequest* req) {
  OptionPairs out;
  for (size_t i = 0; i < st.presets.count; ++i) out.emplace_back(st.presets.items[i].key, st.presets.items[i].value);
  if (!PL_HAS_FIELD(PL_JobRequest, req, strategy_options) || req->strategy_options.count == 0) return out;
  const PL_OptionList& list = req->strategy_options;
  if (list.struct_size < PL_STRUCT_SIZE(PL_OptionList, count))
    fail(PL_ERR_VERSION,
         "PL_JobRequest.strategy_options.struct_size " + std::to_string(list.struct_size) + " is too small");
  if (list.items == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT,
         "PL_JobRequest.strategy_options.items is NULL for " + std::to_string(list.count) + " options");
  for (size_t i = 0; i < list.count; ++i) {
    const PL_Option& o = list.items[i];
    const std::string at = "strategy_options[" + std::to_string(i) + "]";
    if (o.struct_size < PL_STRUCT_SIZE(PL_Option, value))
      fail(PL_ERR_VERSION, at + ".struct_size " + std::to_string(o.struct_size) + " is too small");
    if (o.key == nullptr || o.value == nullptr) fail(PL_ERR_INVALID_ARGUMENT, at + " has a NULL key or value");
    if (*o.key == '\0')
      fail(PL_ERR_INVALID_ARGUMENT, at + " (value '" + std::string(o.value) + "') has an empty key; write KEY=VALUE");
    out.emplace_back(o.key, o.value);
  }
  return out;
}

std::vector<PL_Option> option_items(const OptionPairs& pairs) {
  std::vector<PL_Option> items;
  for (const auto& [k, v] : pairs) items.push_back({sizeof(PL_Option), k.c_str(), v.c_str()});
  return items;
}

// `pairs` with each key once, where it first appeared, holding its last value.
OptionPairs merged(const OptionPairs& pairs) {
  OptionPairs out;
  for (const auto& [k, v] : pairs) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& kv) { return kv.first == k; });
    if (it == out.end())
      out.emplace_back(k, v);
    else
      it->second = v;
  }
  return out;
}

// Lightning 2.x spellings, and the old ones it still takes.
std::string normalize_precision(const std::string& p) {
  if (p == "32-true" || p == "32") return "32-true";
  if (p == "16-mixed" || p == "16") return "16-mixed";
  if (p == "bf16-mixed" || p == "bf16") return "bf16-mixed";
  fail(PL_ERR_INVALID_ARGUMENT, "precision='" + p +
                                    "' is not supported; valid: 32-true, 16-mixed, bf16-mixed (or their old "
                                    "spellings 32, 16, bf16)");
}

// An accelerator instance, for as long as resolution needs to ask it about devices.
struct AcceleratorProbe {
  const PL_AcceleratorApi* api = nullptr;
  PL_Accelerator* instance = nullptr;
  ~AcceleratorProbe() {
    if (api && instance) api->destroy(instance);
  }
};

void check(PL_Error* e, const std::string& context) {
  if (!e) return;
  Error err(e->code, context + ": " + e->message);
  pl_error_destroy(e);
  throw err;
}

PL_DeviceAvailability query_availability(PL_Runtime* rt, const PL_ResolvedPlugin& acc, AcceleratorProbe& probe) {
  probe.api = static_cast<const PL_AcceleratorApi*>(acc.plugin->api);
  check(probe.api->create(&rt->host, &acc.presets, &probe.instance),
        std::string("accelerator '") + acc.plugin->name + "' failed to start");
  PL_DeviceAvailability avail{};
  avail.struct_size = sizeof avail;
  check(probe.api->availability(probe.instance, &avail),
        std::string("accelerator '") + acc.plugin->name + "' could not count its devices");
  avail.reason[sizeof avail.reason - 1] = '\0';
  return avail;
}

}  // namespace

extern "C" {

PL_EXPORT PL_Error* pl_runtime_resolve_job(PL_Runtime* rt, const PL_JobRequest* req, PL_JobConfig** out) {
  return guarded([&] {
    if (!rt || !req || !out) fail(PL_ERR_INVALID_ARGUMENT, "pl_runtime_resolve_job: NULL argument");
    if (req->struct_size < PL_STRUCT_SIZE(PL_JobRequest, assume_device_count))
      fail(PL_ERR_VERSION, "PL_JobRequest.struct_size " + std::to_string(req->struct_size) + " is too small");
    *out = nullptr;
    auto job = std::make_unique<JobStorage>();

    // ---- accelerator ----
    std::string accel_name = req->accelerator && *req->accelerator ? req->accelerator : "auto";
    // devices="usable[:N]" asks the accelerator which devices are free now (find_usable.cpp); with
    // "auto" it asks the default one, as Lightning's find_usable_cuda_devices does.
    const std::optional<int32_t> usable = usable_request(req->devices);
    std::string accel_context = "accelerator";
    if (usable && accel_name == "auto") {
      accel_name = PL_USABLE_DEFAULT_ACCELERATOR;
      accel_context = "devices=" + describe(req->devices) + " needs the " + accel_name + " accelerator";
    }
    PL_ResolvedPlugin acc{};
    PL_DeviceAvailability avail{};
    AcceleratorProbe probe;
    if (accel_name == "auto") {
      // Lightning: a GPU when one is there, else the CPU.
      bool chose_gpu = false;
      PL_ResolvedPlugin cuda{};
      if (PL_Error* e = pl_runtime_find_plugin(rt, PL_PLUGIN_ACCELERATOR, "cuda", &cuda)) {
        rt->logger->debug("accelerator=auto: no cuda plugin ({})", e->message);
        pl_error_destroy(e);
      } else {
        AcceleratorProbe cuda_probe;
        int32_t count = req->assume_device_count >= 0 ? req->assume_device_count
                                                      : query_availability(rt, cuda, cuda_probe).device_count;
        chose_gpu = count > 0;
        if (chose_gpu) acc = cuda;
      }
      if (!chose_gpu) check(pl_runtime_find_plugin(rt, PL_PLUGIN_ACCELERATOR, "cpu", &acc), "accelerator=auto");
    } else {
      check(pl_runtime_find_plugin(rt, PL_PLUGIN_ACCELERATOR, accel_name.c_str(), &acc), accel_context);
    }
    auto* acc_api = static_cast<const PL_AcceleratorApi*>(acc.plugin->api);
    const bool as_processes = (acc_api->flags & PL_ACCEL_DEVICES_ARE_PROCESSES) != 0;
    job->accelerator_s = acc.plugin->name;

    // ---- devices ----
    if (usable) {  // the accelerator's device_status judges, without a device touched in this process
      job->device_ids = resolve_usable_devices(rt, req->devices, *usable, accel_name, req->assume_device_count);
    } else {
      int32_t available = 0;
      std::string reason;
      if (req->assume_device_count >= 0) {
        available = req->assume_device_count;
        reason = "--assume-device-count " + std::to_string(available);
      } else {
        avail = query_availability(rt, acc, probe);
        available = avail.device_count;
        reason = avail.reason;
      }
      PL_DeviceSpec spec = req->devices;
      if (spec.struct_size == 0) {  // an unset spec means "auto"
        spec.struct_size = sizeof spec;
        spec.kind = PL_DEVICES_AUTO;
      }
      try {
        job->device_ids = parse_devices(spec, job->accelerator_s, available, as_processes);
      } catch (const Error& e) {
        std::string msg = e.message;
        if (available == 0 && !as_processes) {
          if (!reason.empty()) msg += " (" + job->accelerator_s + ": " + reason + ")";
          msg += "; to check a GPU job's configuration on a machine without its GPUs, pass --assume-device-count N";
        }
        fail(e.code, msg);
      }
    }

    // ---- nodes ----
    const int32_t num_nodes = req->num_nodes;
    if (num_nodes < 1)
      fail(PL_ERR_INVALID_ARGUMENT, "num_nodes=" + std::to_string(req->num_nodes) + ": must be an int >= 1");

    // ---- strategy ----
    const int32_t ndev = static_cast<int32_t>(job->device_ids.size());
    std::string strategy = req->strategy && *req->strategy ? req->strategy : "auto";
    if (strategy == "auto") strategy = (ndev > 1 || num_nodes > 1) ? "ddp" : "single_device";
    PL_ResolvedPlugin st{};
    check(pl_runtime_find_plugin(rt, PL_PLUGIN_STRATEGY, strategy.c_str(), &st), "strategy");
    auto* st_api = static_cast<const PL_StrategyApi*>(st.plugin->api);
    // launch_info checks the options (an unknown key, a bad value) before any work is done.
    const OptionPairs options = strategy_option_list(st, req);
    const std::vector<PL_Option> items = option_items(options);
    const PL_OptionList option_list{sizeof(PL_OptionList), items.data(), items.size()};
    PL_LaunchInfo launch{};
    launch.struct_size = sizeof launch;
    check(st_api->launch_info(&option_list, &launch), "strategy '" + strategy + "'");
    if (launch.mode != PL_LAUNCH_PROCESS_PER_DEVICE && launch.mode != PL_LAUNCH_SPAWN &&
        launch.mode != PL_LAUNCH_SINGLE_PROCESS)
      fail(PL_ERR_INVALID_ARGUMENT, "strategy '" + strategy + "' answered launch mode " + std::to_string(launch.mode) +
                                        ", which is not one this runtime knows");
    int32_t per_process = launch.mode == PL_LAUNCH_SINGLE_PROCESS ? ndev : 1;
    if (PL_HAS_FIELD(PL_LaunchInfo, &launch, max_devices_per_process) && launch.max_devices_per_process > 0 &&
        per_process > launch.max_devices_per_process)
      fail(PL_ERR_INVALID_ARGUMENT, "strategy '" + strategy + "' drives at most " +
                                        std::to_string(launch.max_devices_per_process) +
                                        " device(s) per process but devices resolves to " + std::to_string(ndev) +
                                        "; use strategy 'ddp' (one process per device) or ask for one device");
    job->strategy_s = strategy;
    job->strategy_plugin_s = st.plugin->name;
    const int32_t ppn = launch.mode == PL_LAUNCH_SINGLE_PROCESS ? 1 : ndev;
    if (static_cast<int64_t>(ppn) * num_nodes > (1 << 24))
      fail(PL_ERR_INVALID_ARGUMENT,
           "world size " + std::to_string(static_cast<int64_t>(ppn) * num_nodes) + " is too large");

    // ---- precision ----
    job->precision_s = normalize_precision(req->precision && *req->precision ? req->precision : "32-true");

    // ---- process-group backend ----
    const bool is_cuda = acc_api->device_type == PL_DEVICE_CUDA;
    job->backend_s = req->process_group_backend && *req->process_group_backend ? req->process_group_backend
                                                                               : (is_cuda ? "nccl" : "gloo");
    if (job->backend_s == "nccl" && !is_cuda)
      fail(PL_ERR_INVALID_ARGUMENT, "process_group_backend='nccl' needs CUDA devices but the accelerator is '" +
                                        job->accelerator_s + "'; use 'gloo'");
    if (launch.needs_process_group && static_cast<int64_t>(ppn) * num_nodes > 1) {
      PL_ResolvedPlugin pg{};
      check(pl_runtime_find_plugin(rt, PL_PLUGIN_PROCESS_GROUP, job->backend_s.c_str(), &pg), "process_group_backend");
    }

    // ---- the answer ----
    job->struct_size = sizeof(PL_JobConfig);
    job->accelerator = job->accelerator_s.c_str();
    job->device_type = acc_api->device_type;
    job->devices = job->device_ids.data();
    job->num_devices = job->device_ids.size();
    job->strategy = job->strategy_s.c_str();
    job->strategy_plugin = job->strategy_plugin_s.c_str();
    job->options = merged(options);
    job->option_items = option_items(job->options);
    job->strategy_options = {sizeof(PL_OptionList), job->option_items.data(), job->option_items.size()};
    job->launch_mode = launch.mode;
    job->num_nodes = num_nodes;
    job->processes_per_node = ppn;
    job->world_size = ppn * num_nodes;
    job->process_group_backend = job->backend_s.c_str();
    job->precision = job->precision_s.c_str();
    *out = job.release();
  });
}

PL_EXPORT void pl_job_config_destroy(PL_JobConfig* config) { delete static_cast<JobStorage*>(config); }

PL_EXPORT PL_Error* pl_parse_devices(const PL_DeviceSpec* spec, const char* accelerator, int32_t available,
                                     int32_t devices_are_processes, int32_t* out_ids, size_t capacity,
                                     size_t* out_count) {
  return guarded([&] {
    if (!spec || !out_count) fail(PL_ERR_INVALID_ARGUMENT, "pl_parse_devices: spec or out_count is NULL");
    auto ids = parse_devices(*spec, accelerator ? accelerator : "the", available, devices_are_processes != 0);
    *out_count = ids.size();
    if (out_ids) std::copy_n(ids.begin(), std::min(capacity, ids.size()), out_ids);
    if (out_ids && capacity < ids.size())
      fail(PL_ERR_INVALID_ARGUMENT, "pl_parse_devices: capacity " + std::to_string(capacity) + " is less than the " +
                                        std::to_string(ids.size()) + " devices parsed");
  });
}

}  // extern "C"
