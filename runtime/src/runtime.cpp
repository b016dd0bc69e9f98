// The runtime's C API: errors, create/destroy, the host table, finding and listing plugins, versions.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime_impl.hpp"
#include "store/tcp_store.hpp"

using namespace plrt::rt;

namespace plrt::rt {

PL_Error* oom_error() noexcept {
  static PL_Error oom{PL_ERR_RESOURCE, "out of memory"};  // constant: safe to share between runtimes
  return &oom;
}

void fill_resolved(const Resolution& r, PL_ResolvedPlugin* out) {
  out->struct_size = sizeof(PL_ResolvedPlugin);
  out->plugin = r.plugin->descriptor;
  // Both names are static strings inside the plugin, which the runtime keeps loaded.
  out->requested_name = r.alias ? r.alias->name : r.plugin->descriptor->name;
  out->presets = r.alias ? r.alias->presets : PL_OptionList{sizeof(PL_OptionList), nullptr, 0};
  out->path = r.plugin->path.c_str();  // owned by the loader, which the runtime owns
}

}  // namespace plrt::rt

namespace {

// ---- the host table: what a plugin can call ----
PL_Error* host_error_new(PL_ErrorCode code, const char* message) {
  return make_error(code, message ? message : "(no message)");
}
void host_error_destroy(PL_Error* e) { pl_error_destroy(e); }
const char* host_error_message(const PL_Error* e) { return pl_error_message(e); }
PL_ErrorCode host_error_code(const PL_Error* e) { return pl_error_code(e); }

void host_log(PL_HostContext* ctx, PL_LogLevel level, const char* source, const char* message) {
  if (!ctx || !ctx->runtime) return;
  try {
    ctx->runtime->logger->log(to_spdlog(level), "[{}] {}", source ? source : "plugin", message ? message : "");
  } catch (...) {
  }
}

int32_t host_log_enabled(PL_HostContext* ctx, PL_LogLevel level) {
  return ctx && ctx->runtime && ctx->runtime->logger->should_log(to_spdlog(level)) ? 1 : 0;
}

PL_Error* host_find_plugin(PL_HostContext* ctx, PL_PluginKind kind, const char* name, PL_ResolvedPlugin* out) {
  return pl_runtime_find_plugin(ctx ? ctx->runtime : nullptr, kind, name, out);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::optional<int> rank_for_logs(int32_t option_rank) {
  if (option_rank >= 0) return option_rank;
  for (const char* var : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return std::nullopt;
}

// The listing handed out is the base of its storage, so destroy can recover the storage.
struct ListingStorage : PL_PluginListing {
  std::vector<PL_PluginListEntry> entry_items;
  std::vector<std::string> problem_strings;
  std::vector<const char*> problem_ptrs;
};

}  // namespace

extern "C" {

PL_EXPORT const char* pl_error_message(const PL_Error* e) { return e ? e->message.c_str() : "no error"; }
PL_EXPORT PL_ErrorCode pl_error_code(const PL_Error* e) { return e ? e->code : PL_ERR_OK; }
PL_EXPORT PL_Error* pl_error_new(PL_ErrorCode code, const char* message) { return host_error_new(code, message); }
PL_EXPORT void pl_error_destroy(PL_Error* e) {
  if (e != oom_error()) delete e;
}

PL_EXPORT PL_Error* pl_runtime_create(const PL_RuntimeOptions* options, PL_Runtime** out) {
  return guarded([&] {
    if (!out) fail(PL_ERR_INVALID_ARGUMENT, "pl_runtime_create: out is NULL");
    *out = nullptr;
    PL_RuntimeOptions o{};
    o.struct_size = sizeof o;
    o.rank = -1;
    if (options) {
      if (options->struct_size < PL_STRUCT_SIZE(PL_RuntimeOptions, struct_size) ||
          options->struct_size > sizeof(PL_RuntimeOptions) * 4)
        fail(PL_ERR_VERSION, "PL_RuntimeOptions.struct_size " + std::to_string(options->struct_size) +
                                 " is not a valid size (this runtime's is " + std::to_string(sizeof o) + ")");
      // Read only what the caller declared; the rest keeps its default.
      std::memcpy(&o, options, std::min(options->struct_size, sizeof o));
      o.struct_size = sizeof o;
    }
    std::string level_origin = "log_level option";
    std::string level;
    if (o.log_level) {
      level = o.log_level;
    } else {
      level = env_or("PL_LOG_LEVEL", "info");
      level_origin = "PL_LOG_LEVEL";
    }

    auto rt = std::make_unique<PL_Runtime>();
    rt->logger = make_logger(level, level_origin, rank_for_logs(o.rank), o.log_callback, o.log_user);
    rt->host.struct_size = sizeof(PL_Host);
    rt->host.abi_major = PL_ABI_MAJOR;
    rt->host.abi_minor = PL_ABI_MINOR;
    rt->host.ctx = &rt->context;
    rt->host.error_new = host_error_new;
    rt->host.error_destroy = host_error_destroy;
    rt->host.error_message = host_error_message;
    rt->host.error_code = host_error_code;
    rt->host.log = host_log;
    rt->host.log_enabled = host_log_enabled;
    rt->host.find_plugin = host_find_plugin;
    rt->host.store_api = plrt::store::tcp_store_api();  // the rendezvous store (store/tcp_store.cpp)

    // Bad folders are refused before anything is loaded (search_path.hpp).
    std::vector<std::string> dirs;
    if (o.num_plugin_dirs && !o.plugin_dirs)
      fail(PL_ERR_INVALID_ARGUMENT,
           "PL_RuntimeOptions.plugin_dirs is NULL but num_plugin_dirs is " + std::to_string(o.num_plugin_dirs));
    for (size_t i = 0; i < o.num_plugin_dirs; ++i) {
      if (!o.plugin_dirs[i])
        fail(PL_ERR_INVALID_ARGUMENT, "PL_RuntimeOptions.plugin_dirs[" + std::to_string(i) + "] is NULL");
      dirs.emplace_back(o.plugin_dirs[i]);
    }
    std::vector<std::string> warnings;
    auto search = plugin_search_path(dirs, !o.skip_env_dirs, !o.skip_default_dirs, &warnings);
    for (const auto& w : warnings) rt->logger->warn("{}", w);
    auto* logger = rt->logger.get();  // the loader lives inside the runtime, so does the logger
    rt->loader = std::make_unique<PluginLoader>(std::move(search), &rt->host,
                                                [logger](const std::string& line) { logger->warn("{}", line); });
    for (const auto& d : rt->loader->search_dirs())
      rt->logger->debug("plugin search path: {} ({})", d.path.string(), origin_name(d.origin));
    *out = rt.release();
  });
}

PL_EXPORT void pl_runtime_destroy(PL_Runtime* rt) {
  if (!rt) return;
  try {
    rt->logger->flush();
  } catch (...) {
  }
  delete rt;
}

PL_EXPORT const PL_Host* pl_runtime_host(PL_Runtime* rt) { return rt ? &rt->host : nullptr; }

PL_EXPORT void pl_runtime_log(PL_Runtime* rt, PL_LogLevel level, const char* message) {
  if (!rt) return;
  try {
    rt->logger->log(to_spdlog(level), "{}", message ? message : "");
  } catch (...) {
  }
}

PL_EXPORT PL_Error* pl_runtime_find_plugin(PL_Runtime* rt, PL_PluginKind kind, const char* name,
                                           PL_ResolvedPlugin* out) {
  return guarded([&] {
    if (!rt) fail(PL_ERR_INVALID_ARGUMENT, "pl_runtime_find_plugin: runtime is NULL");
    if (!name || !*name) fail(PL_ERR_INVALID_ARGUMENT, "pl_runtime_find_plugin: the name is empty");
    if (!out) fail(PL_ERR_INVALID_ARGUMENT, "pl_runtime_find_plugin: out is NULL");
    Resolution r = rt->loader->resolve(kind, name);
    fill_resolved(r, out);
    rt->logger->debug("{} '{}' -> {}", kind_name(kind), name, r.plugin->path.string());
  });
}

PL_EXPORT PL_Error* pl_runtime_list_plugins(PL_Runtime* rt, PL_PluginListing** out) {
  return guarded([&] {
    if (!rt || !out) fail(PL_ERR_INVALID_ARGUMENT, "pl_runtime_list_plugins: runtime or out is NULL");
    auto storage = std::make_unique<ListingStorage>();
    auto plugins = rt->loader->load_all(&storage->problem_strings);
    for (const LoadedPlugin* p : plugins) {
      const PL_Plugin* d = p->descriptor;
      storage->entry_items.push_back(
          {sizeof(PL_PluginListEntry), d->kind, d->name, nullptr, d->version, d->description, p->path.c_str()});
      for (size_t i = 0; i < d->num_aliases; ++i) {
        const PL_Alias& a = d->aliases[i];
        storage->entry_items.push_back({sizeof(PL_PluginListEntry), d->kind, a.name, d->name, d->version,
                                        a.description ? a.description : d->description, p->path.c_str()});
      }
    }
    std::sort(storage->entry_items.begin(), storage->entry_items.end(), [](const auto& a, const auto& b) {
      if (a.kind != b.kind) return a.kind < b.kind;
      return std::string(a.name) < std::string(b.name);
    });
    for (const auto& s : storage->problem_strings) storage->problem_ptrs.push_back(s.c_str());
    storage->struct_size = sizeof(PL_PluginListing);
    storage->entries = storage->entry_items.data();
    storage->num_entries = storage->entry_items.size();
    storage->problems = storage->problem_ptrs.data();
    storage->num_problems = storage->problem_ptrs.size();
    *out = storage.release();
  });
}

PL_EXPORT void pl_plugin_listing_destroy(PL_PluginListing* listing) { delete static_cast<ListingStorage*>(listing); }

PL_EXPORT const char* pl_runtime_version(void) { return PLRT_VERSION; }

PL_EXPORT void pl_runtime_abi_version(int32_t* major, int32_t* minor) {
  if (major) *major = PL_ABI_MAJOR;
  if (minor) *minor = PL_ABI_MINOR;
}

}  // extern "C"
