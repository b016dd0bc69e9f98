// pl::Runtime: a plrt runtime (plugin search path, logger, host table) owned by a C++ object.
#pragma once

#include <memory>
#include <optional>
#include <plrt/sdk/devices.hpp>
#include <plrt/sdk/error.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl {

struct RuntimeOptions {
  std::vector<std::string> plugin_dirs;   // searched first, in order; each must be an existing folder
  bool use_env_dirs = true;               // PL_PLUGIN_PATH (searched last)
  bool use_default_dirs = true;           // <folder of libplrt_runtime.so>/plrt/plugins (second)
  std::optional<std::string> log_level;   // default: PL_LOG_LEVEL, else "info"
  int rank = -1;                          // "[rank N]" prefix; -1: from $RANK
  PL_LogCallback log_callback = nullptr;  // default: stderr
  void* log_user = nullptr;
};

// A plugin found by name or alias.  Its pointers stay valid while the Runtime lives.
struct PluginRef {
  const PL_Plugin* plugin = nullptr;
  std::string requested_name;
  std::vector<std::pair<std::string, std::string>> presets;
  std::string path;
  PL_OptionList preset_list{sizeof(PL_OptionList), nullptr, 0};  // the C view of presets

  std::string name() const { return plugin->name; }
  PL_PluginKind kind() const { return plugin->kind; }
  template <class Api>
  const Api* api() const {
    return static_cast<const Api*>(plugin->api);
  }
};

struct PluginInfo {
  PL_PluginKind kind;
  std::string name, alias_of, version, description, path;
};

struct JobRequest {
  std::string accelerator = "auto";
  Devices devices = Devices::automatic();
  std::string strategy = "auto";
  int num_nodes = 1;
  std::string precision = "32-true";
  std::string process_group_backend;  // empty: nccl for cuda, gloo otherwise
  int assume_device_count = -1;       // >= 0: pretend the accelerator has this many devices
  // The user's strategy options, after the alias's presets (a later entry overrides an earlier
  // one); the strategy's launch_info rejects an unknown key or a bad value.
  std::vector<std::pair<std::string, std::string>> strategy_options;
};

struct JobConfig {
  std::string accelerator;
  PL_DeviceType device_type = PL_DEVICE_CPU;
  std::vector<int> devices;
  std::string strategy, strategy_plugin;
  std::vector<std::pair<std::string, std::string>> strategy_options;  // presets + the request's, merged
  PL_LaunchMode launch_mode = PL_LAUNCH_SINGLE_PROCESS;
  int num_nodes = 1, processes_per_node = 1, world_size = 1;
  std::string process_group_backend, precision;
};

inline const char* kind_name(PL_PluginKind kind) {
  switch (kind) {
    case PL_PLUGIN_ACCELERATOR:
      return "accelerator";
    case PL_PLUGIN_PROCESS_GROUP:
      return "process_group";
    case PL_PLUGIN_STRATEGY:
      return "strategy";
    default:
      return "unknown";
  }
}

inline const char* launch_mode_name(PL_LaunchMode mode) {
  switch (mode) {
    case PL_LAUNCH_PROCESS_PER_DEVICE:
      return "process_per_device";
    case PL_LAUNCH_SPAWN:
      return "spawn";
    case PL_LAUNCH_SINGLE_PROCESS:
      return "single_process";
    default:
      return "unknown";
  }
}

class Runtime {
 public:
  explicit Runtime(const RuntimeOptions& options = {}) {
    std::vector<const char*> dirs;
    for (const auto& d : options.plugin_dirs) dirs.push_back(d.c_str());
    PL_RuntimeOptions o{};
    o.struct_size = sizeof o;
    o.plugin_dirs = dirs.data();
    o.num_plugin_dirs = dirs.size();
    o.skip_env_dirs = options.use_env_dirs ? 0 : 1;
    o.skip_default_dirs = options.use_default_dirs ? 0 : 1;
    o.log_level = options.log_level ? options.log_level->c_str() : nullptr;
    o.rank = options.rank;
    o.log_callback = options.log_callback;
    o.log_user = options.log_user;
    PL_Runtime* rt = nullptr;
    check(pl_runtime_create(&o, &rt));
    rt_.reset(rt);
  }

  PL_Runtime* get() const { return rt_.get(); }
  const PL_Host* host() const { return pl_runtime_host(rt_.get()); }
  void log(PL_LogLevel level, const std::string& message) const { pl_runtime_log(rt_.get(), level, message.c_str()); }

  PluginRef find(PL_PluginKind kind, const std::string& name_or_path) const {
    PL_ResolvedPlugin r{};
    r.struct_size = sizeof r;
    check(pl_runtime_find_plugin(rt_.get(), kind, name_or_path.c_str(), &r));
    PluginRef ref;
    ref.plugin = r.plugin;
    ref.requested_name = r.requested_name;
    ref.path = r.path;
    for (size_t i = 0; i < r.presets.count; ++i)
      ref.presets.emplace_back(r.presets.items[i].key, r.presets.items[i].value);
    ref.preset_list = r.presets;  // static inside the plugin
    return ref;
  }

  // Every plugin and alias in the search path; `problems` gets the files that failed to load.
  std::vector<PluginInfo> list(std::vector<std::string>* problems = nullptr) const {
    PL_PluginListing* listing = nullptr;
    check(pl_runtime_list_plugins(rt_.get(), &listing));
    std::unique_ptr<PL_PluginListing, decltype(&pl_plugin_listing_destroy)> guard(listing, pl_plugin_listing_destroy);
    std::vector<PluginInfo> out;
    for (size_t i = 0; i < listing->num_entries; ++i) {
      const auto& e = listing->entries[i];
      out.push_back({e.kind, e.name, e.alias_of ? e.alias_of : "", e.version, e.description, e.path});
    }
    if (problems)
      for (size_t i = 0; i < listing->num_problems; ++i) problems->emplace_back(listing->problems[i]);
    return out;
  }

  JobConfig resolve(const JobRequest& req) const {
    DeviceSpecHolder devices(req.devices);
    PL_JobRequest r{};
    r.struct_size = sizeof r;
    r.accelerator = req.accelerator.c_str();
    r.devices = devices.spec();
    r.strategy = req.strategy.c_str();
    r.num_nodes = req.num_nodes;
    r.precision = req.precision.c_str();
    r.process_group_backend = req.process_group_backend.empty() ? nullptr : req.process_group_backend.c_str();
    r.assume_device_count = req.assume_device_count;
    std::vector<PL_Option> options;
    for (const auto& [key, value] : req.strategy_options)
      options.push_back({sizeof(PL_Option), key.c_str(), value.c_str()});
    r.strategy_options = {sizeof(PL_OptionList), options.data(), options.size()};
    PL_JobConfig* c = nullptr;
    check(pl_runtime_resolve_job(rt_.get(), &r, &c));
    std::unique_ptr<PL_JobConfig, decltype(&pl_job_config_destroy)> guard(c, pl_job_config_destroy);
    JobConfig out;
    out.accelerator = c->accelerator;
    out.device_type = c->device_type;
    out.devices.assign(c->devices, c->devices + c->num_devices);
    out.strategy = c->strategy;
    out.strategy_plugin = c->strategy_plugin;
    for (size_t i = 0; i < c->strategy_options.count; ++i)
      out.strategy_options.emplace_back(c->strategy_options.items[i].key, c->strategy_options.items[i].value);
    out.launch_mode = c->launch_mode;
    out.num_nodes = c->num_nodes;
    out.processes_per_node = c->processes_per_node;
    out.world_size = c->world_size;
    out.process_group_backend = c->process_group_backend;
    out.precision = c->precision;
    return out;
  }

 private:
  struct Deleter {
    void operator()(PL_Runtime* rt) const { pl_runtime_destroy(rt); }
  };
  std::unique_ptr<PL_Runtime, Deleter> rt_;
};

}  // namespace pl
