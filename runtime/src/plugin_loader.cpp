#include "plugin_loader.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include "error.hpp"

namespace fs = std::filesystem;

namespace plrt::rt {
namespace {

constexpr const char* kSuffix = ".so";
const PL_PluginKind kKinds[] = {PL_PLUGIN_ACCELERATOR, PL_PLUGIN_PROCESS_GROUP, PL_PLUGIN_STRATEGY};

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// The entry symbols this runtime understands, newest first.  A future major version adds its
// symbol at the front and an adapter that presents the old descriptor in the new shape.
struct EntryVersion {
  int major;
  const char* symbol;
};
const EntryVersion kEntryVersions[] = {{1, PL_PLUGIN_ENTRY_SYMBOL}};

size_t min_api_size(PL_PluginKind kind) {
  switch (kind) {
    case PL_PLUGIN_ACCELERATOR:
      return PL_ACCELERATOR_API_MIN_SIZE;
    case PL_PLUGIN_PROCESS_GROUP:
      return PL_PROCESS_GROUP_API_MIN_SIZE;
    case PL_PLUGIN_STRATEGY:
      return PL_STRATEGY_API_MIN_SIZE;
    default:
      return 0;
  }
}

const char* api_type_name(PL_PluginKind kind) {
  switch (kind) {
    case PL_PLUGIN_ACCELERATOR:
      return "PL_AcceleratorApi";
    case PL_PLUGIN_PROCESS_GROUP:
      return "PL_ProcessGroupApi";
    case PL_PLUGIN_STRATEGY:
      return "PL_StrategyApi";
    default:
      return "?";
  }
}

// The REQUIRED entries of each table: a name for the error and whether it is set.
std::vector<std::pair<const char*, bool>> required_entries(PL_PluginKind kind, const void* api) {
  switch (kind) {
    case PL_PLUGIN_ACCELERATOR: {
      auto* a = static_cast<const PL_AcceleratorApi*>(api);
      return {{"create", a->create},
              {"destroy", a->destroy},
              {"availability", a->availability},
              {"device_info", a->device_info},
              {"set_device", a->set_device}};
    }
    case PL_PLUGIN_PROCESS_GROUP: {
      auto* p = static_cast<const PL_ProcessGroupApi*>(api);
      return {{"create", p->create},
              {"destroy", p->destroy},
              {"work_wait", p->work_wait},
              {"work_destroy", p->work_destroy}};
    }
    case PL_PLUGIN_STRATEGY: {
      auto* s = static_cast<const PL_StrategyApi*>(api);
      return {{"launch_info", s->launch_info}, {"create", s->create},
              {"destroy", s->destroy},         {"setup", s->setup},
              {"run_step", s->run_step},       {"after_backward", s->after_backward},
              {"teardown", s->teardown}};
    }
    default:
      return {};
  }
}

[[noreturn]] void file_error(PL_ErrorCode code, const fs::path& path, const std::string& why) {
  fail(code, "plugin file " + path.string() + ": " + why);
}

}  // namespace

std::string kind_name(PL_PluginKind kind) {
  switch (kind) {
    case PL_PLUGIN_ACCELERATOR:
      return "accelerator";
    case PL_PLUGIN_PROCESS_GROUP:
      return "process_group";
    case PL_PLUGIN_STRATEGY:
      return "strategy";
    default:
      return "unknown kind " + std::to_string(kind);
  }
}

std::optional<PL_PluginKind> kind_from_name(const std::string& text) {
  for (auto k : kKinds)
    if (kind_name(k) == text) return k;
  return std::nullopt;
}

std::string plugin_file_name(PL_PluginKind kind, const std::string& name) {
  return std::string(PL_PLUGIN_FILE_PREFIX) + kind_name(kind) + "_" + name + kSuffix;
}

std::optional<std::pair<PL_PluginKind, std::string>> parse_plugin_file_name(const std::string& file) {
  const std::string prefix = PL_PLUGIN_FILE_PREFIX;
  const std::string suffix = kSuffix;
  if (file.size() <= prefix.size() + suffix.size() || file.compare(0, prefix.size(), prefix) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  std::string rest = file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
  // Longest kind first: "process_group" must not be read as kind "process" + name "group_x".
  for (auto k : {PL_PLUGIN_PROCESS_GROUP, PL_PLUGIN_ACCELERATOR, PL_PLUGIN_STRATEGY}) {
    std::string kn = kind_name(k) + "_";
    if (rest.compare(0, kn.size(), kn) == 0 && rest.size() > kn.size()) return {{k, rest.substr(kn.size())}};
  }
  return std::nullopt;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

PluginLoader::PluginLoader(std::vector<SearchDir> search_dirs, const PL_Host* host,
                           std::function<void(const std::string&)> warn)
    : dirs_(std::move(search_dirs)), host_(host), warn_(std::move(warn)) {}

std::vector<fs::path> PluginLoader::candidate_files(std::optional<PL_PluginKind> kind) const {
  std::vector<fs::path> files;
  std::set<std::string> names;  // the first directory that has a file name wins
  for (const auto& [dir, origin] : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> here;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      auto parsed = parse_plugin_file_name(entry.path().filename().string());
      if (!parsed || (kind && parsed->first != *kind)) continue;
      here.push_back(entry.path());
    }
    std::sort(here.begin(), here.end());
    for (auto& p : here)
      if (names.insert(p.filename().string()).second) files.push_back(p);
  }
  return files;
}

const LoadedPlugin& PluginLoader::load_file(const fs::path& path, std::optional<PL_PluginKind> expected_kind) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::error_code ec;
  if (!fs::exists(path, ec)) file_error(PL_ERR_NOT_FOUND, path, "no such file");
  fs::path canon = fs::canonical(path, ec);
  if (ec) canon = path;
  if (auto it = loaded_.find(canon); it != loaded_.end()) {
    const PL_Plugin* d = it->second->descriptor;
    if (expected_kind && d->kind != *expected_kind)
      file_error(PL_ERR_INVALID_ARGUMENT, path,
                 "is a " + kind_name(d->kind) + " plugin, not a " + kind_name(*expected_kind) + " plugin");
    return *it->second;
  }

  // Under ThreadSanitizer a plugin stays mapped after its last handle closes: TSan's atexit
  // interceptor keeps the handlers a library registered (the CUDA runtime's, statically linked into
  // the cuda plugin) past dlclose, and runs them at exit from unmapped memory.  Elsewhere plugins
  // unload normally.
#if defined(__SANITIZE_THREAD__)
  constexpr auto kKeepLoaded = static_cast<dll::load_mode::type>(RTLD_NODELETE);
#else
  constexpr auto kKeepLoaded = static_cast<dll::load_mode::type>(0);
#endif
  auto plugin = std::make_unique<LoadedPlugin>();
  plugin->path = canon;
  try {
    plugin->library.load(canon, dll::load_mode::rtld_now | dll::load_mode::rtld_local | kKeepLoaded);
  } catch (const std::exception& e) {
    file_error(PL_ERR_INVALID_ARGUMENT, path, std::string("not a loadable shared library (") + e.what() + ")");
  }

  // Entry symbols newest to oldest; then the version symbol, to explain a newer major.
  const EntryVersion* found = nullptr;
  for (const auto& v : kEntryVersions)
    if (plugin->library.has(v.symbol)) {
      found = &v;
      break;
    }
  if (!found) {
    if (plugin->library.has(PL_PLUGIN_ABI_VERSION_SYMBOL)) {
      auto version_fn = dll::import_symbol<uint32_t()>(plugin->library, PL_PLUGIN_ABI_VERSION_SYMBOL);
      uint32_t v = version_fn();
      file_error(PL_ERR_VERSION, path,
                 "built for plrt plugin ABI " + std::to_string(v >> 16) + "." + std::to_string(v & 0xffff) +
                     ", newer than this runtime's major " + std::to_string(PL_ABI_MAJOR) +
                     " (it has no " PL_PLUGIN_ENTRY_SYMBOL
                     "); rebuild it against this runtime's headers or "
                     "upgrade the runtime");
    }
    file_error(PL_ERR_INVALID_ARGUMENT, path,
               "no entry symbol " PL_PLUGIN_ENTRY_SYMBOL " (is it a plrt plugin? define it with PL_DEFINE_PLUGIN)");
  }

  auto entry = dll::import_symbol<PL_Error*(const PL_Host*, const PL_Plugin**)>(plugin->library, found->symbol);
  const PL_Plugin* d = nullptr;
  if (PL_Error* err = entry(host_, &d)) {
    std::string msg = err->message;
    delete err;
    file_error(PL_ERR_VERSION, path, "the plugin refused the host: " + msg);
  }
  if (!d) file_error(PL_ERR_VERSION, path, "the plugin refused the host (its entry returned no descriptor)");
  if (d->struct_size < PL_STRUCT_SIZE(PL_Plugin, api))
    file_error(PL_ERR_VERSION, path,
               "PL_Plugin descriptor is " + std::to_string(d->struct_size) + " bytes, smaller than the " +
                   std::to_string(PL_STRUCT_SIZE(PL_Plugin, api)) + " bytes ABI 1.0 requires");
  if (d->abi_major != PL_ABI_MAJOR)
    file_error(PL_ERR_VERSION, path,
               "descriptor declares ABI major " + std::to_string(d->abi_major) + ", this runtime speaks " +
                   std::to_string(PL_ABI_MAJOR));
  if (d->abi_minor < 0)
    file_error(PL_ERR_VERSION, path,
               "descriptor declares ABI minor " + std::to_string(d->abi_minor) + "; a minor version is >= 0");
  const bool newer_minor = d->abi_minor > PL_ABI_MINOR;
  if (d->kind != PL_PLUGIN_ACCELERATOR && d->kind != PL_PLUGIN_PROCESS_GROUP && d->kind != PL_PLUGIN_STRATEGY)
    file_error(PL_ERR_INVALID_ARGUMENT, path,
               "descriptor has kind " + std::to_string(d->kind) + "; valid: accelerator, process_group, strategy");
  if (!d->name || !valid_name(d->name))
    file_error(PL_ERR_INVALID_ARGUMENT, path,
               "descriptor name " + std::string(d->name ? "'" + std::string(d->name) + "'" : "NULL") +
                   " is not a valid plugin name (lowercase letters, digits, '_' or '-', 1 to 64 characters)");
  auto parsed = parse_plugin_file_name(path.filename().string());
  if (parsed && (parsed->first != d->kind || parsed->second != d->name))
    file_error(PL_ERR_INVALID_ARGUMENT, path,
               "the file is named for " + kind_name(parsed->first) + " '" + parsed->second +
                   "' but the plugin inside declares " + kind_name(d->kind) + " '" + d->name +
                   "'; rename the file to " + plugin_file_name(d->kind, d->name));
  if (expected_kind && d->kind != *expected_kind)
    file_error(PL_ERR_INVALID_ARGUMENT, path,
               "is a " + kind_name(d->kind) + " plugin, not a " + kind_name(*expected_kind) + " plugin");
  if (!d->version || !d->description)
    file_error(PL_ERR_INVALID_ARGUMENT, path, "descriptor has a NULL version or description");
  if (!d->api) file_error(PL_ERR_INVALID_ARGUMENT, path, "descriptor has a NULL api table");
  size_t api_size = *static_cast<const size_t*>(d->api);
  if (api_size < min_api_size(d->kind))
    file_error(PL_ERR_VERSION, path,
               std::string(api_type_name(d->kind)) + " table is " + std::to_string(api_size) +
                   " bytes, smaller than the " + std::to_string(min_api_size(d->kind)) + " bytes ABI 1.0 requires");
  for (auto [entry_name, present] : required_entries(d->kind, d->api))
    if (!present)
      file_error(PL_ERR_INVALID_ARGUMENT, path,
                 std::string(api_type_name(d->kind)) + "." + entry_name + " is NULL but required");
  if (d->num_aliases && !d->aliases) file_error(PL_ERR_INVALID_ARGUMENT, path, "num_aliases > 0 but aliases is NULL");
  for (size_t i = 0; i < d->num_aliases; ++i) {
    const PL_Alias& a = d->aliases[i];
    if (a.struct_size < PL_STRUCT_SIZE(PL_Alias, presets) || !a.name || !valid_name(a.name))
      file_error(PL_ERR_INVALID_ARGUMENT, path, "alias #" + std::to_string(i) + " is malformed (size or name)");
    if (a.presets.count && !a.presets.items)
      file_error(PL_ERR_INVALID_ARGUMENT, path,
                 std::string("alias '") + a.name + "' has presets.count > 0 but no items");
  }
  // A newer minor is accepted (pl_abi.h, rule 8): such a plugin checks the host's version itself
  // and refuses an older host in its entry when it needs more than it has; warn once per file, as
  // one that does not check would misbehave.
  if (newer_minor && warn_) {
    const std::string ours = std::to_string(PL_ABI_MAJOR) + "." + std::to_string(PL_ABI_MINOR);
    const std::string theirs = std::to_string(d->abi_major) + "." + std::to_string(d->abi_minor);
    warn_("plugin file " + canon.string() + " (" + kind_name(d->kind) + " '" + d->name +
          "') was built for plugin ABI " + theirs + ", newer than this runtime's " + ours +
          ". It is loaded: its entry accepted this host, and a plugin of a newer minor must check PL_Host.abi_minor "
          "and PL_HAS_FIELD before it uses anything added after " +
          ours + " (pl_abi.h, rule 8). If it fails or misbehaves, upgrade plrt to a runtime of ABI " + theirs +
          " or later, or rebuild the plugin against this runtime's headers (ABI " + ours + ")");
  }
  plugin->descriptor = d;
  auto& ref = *plugin;
  loaded_.emplace(canon, std::move(plugin));
  return ref;
}

Resolution PluginLoader::resolve(PL_PluginKind kind, const std::string& name_or_path) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (kind != PL_PLUGIN_ACCELERATOR && kind != PL_PLUGIN_PROCESS_GROUP && kind != PL_PLUGIN_STRATEGY)
    fail(PL_ERR_INVALID_ARGUMENT, "plugin kind " + std::to_string(kind) +
                                      " is not one of accelerator (1), "
                                      "process_group (2), strategy (3)");
  if (name_or_path.find('/') != std::string::npos) {
    const LoadedPlugin& p = load_file(name_or_path, kind);
    return {&p, p.descriptor->name, nullptr};
  }
  const std::string& name = name_or_path;
  if (!valid_name(name))
    fail(PL_ERR_INVALID_ARGUMENT, "'" + name + "' is not a valid " + kind_name(kind) +
                                      " name (lowercase letters, digits, '_' or '-'); or give a path containing '/'");

  // 1. A file named for it, first directory first.
  const std::string file = plugin_file_name(kind, name);
  for (const auto& [dir, origin] : dirs_) {
    std::error_code ec;
    if (fs::exists(dir / file, ec)) {
      const LoadedPlugin& p = load_file(dir / file, kind);
      return {&p, name, nullptr};
    }
  }
  // 2. An alias declared by any plugin of this kind.
  std::vector<std::string> available;
  std::vector<std::string> problems;
  for (const auto& path : candidate_files(kind)) {
    const LoadedPlugin* p = nullptr;
    try {
      p = &load_file(path, kind);
    } catch (const Error& e) {
      problems.push_back(e.message);
      continue;
    }
    available.emplace_back(p->descriptor->name);
    for (size_t i = 0; i < p->descriptor->num_aliases; ++i) {
      const PL_Alias& a = p->descriptor->aliases[i];
      if (name == a.name) return {p, name, &a};
      available.emplace_back(a.name);
    }
  }
  // 3. Nothing: list what there is and the closest name.
  std::sort(available.begin(), available.end());
  std::string msg = "no " + kind_name(kind) + " plugin named '" + name + "'";
  if (available.empty()) {
    msg += "; none are installed";
  } else {
    msg += "; available: " + join(available);
    auto best = std::min_element(available.begin(), available.end(), [&](const auto& a, const auto& b) {
      return edit_distance(name, a) < edit_distance(name, b);
    });
    if (edit_distance(name, *best) <= std::max<size_t>(2, name.size() / 3)) msg += " (closest: '" + *best + "')";
  }
  std::vector<std::string> dir_names;
  for (const auto& [dir, origin] : dirs_) {
    std::error_code ec;
    dir_names.push_back(dir.string() + " (" + origin_name(origin) + (fs::is_directory(dir, ec) ? "" : ", missing") +
                        ")");
  }
  msg += ". Looked for " + file + " in: " + (dir_names.empty() ? std::string("(no directories)") : join(dir_names));
  msg +=
      ". Add folders with plrun --plugin-path (PL_RuntimeOptions.plugin_dirs) or PL_PLUGIN_PATH; an installed "
      "runtime's own plugins are in plrt/plugins beside libplrt_runtime.so";
  if (!problems.empty()) msg += ". Files that failed to load: " + join(problems, "; ");
  fail(PL_ERR_NOT_FOUND, msg);
}

std::vector<const LoadedPlugin*> PluginLoader::load_all(std::vector<std::string>* problems) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<const LoadedPlugin*> out;
  for (const auto& path : candidate_files(std::nullopt)) {
    try {
      out.push_back(&load_file(path, std::nullopt));
    } catch (const Error& e) {
      if (problems) problems->push_back(e.message);
    }
  }
  return out;
}

}  // namespace plrt::rt
