// Finding plugins by name: the file-name pattern, loading through Boost.DLL, and every check a
// plugin file must pass before the runtime trusts it.  The folders searched: search_path.hpp.
#pragma once

#include <plrt/pl_plugin.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dll_shim.hpp"
#include "search_path.hpp"

namespace plrt::rt {

// "accelerator", "process_group", "strategy"; "unknown kind N" otherwise.
std::string kind_name(PL_PluginKind kind);
// Parses "accelerator"/"process_group"/"strategy"; nullopt otherwise.
std::optional<PL_PluginKind> kind_from_name(const std::string& text);
// libplrt_<kind>_<name>.so
std::string plugin_file_name(PL_PluginKind kind, const std::string& name);
// Splits a file name of that pattern; nullopt when it does not match.
std::optional<std::pair<PL_PluginKind, std::string>> parse_plugin_file_name(const std::string& file);

// One loaded, validated plugin file.  The library stays loaded while this lives.
struct LoadedPlugin {
  std::filesystem::path path;
  dll::shared_library library;
  const PL_Plugin* descriptor = nullptr;
};

// A name resolved to a plugin: by its own name or by one of its aliases.
struct Resolution {
  const LoadedPlugin* plugin = nullptr;
  std::string requested_name;
  const PL_Alias* alias = nullptr;  // nullptr when found by its own name
};

class PluginLoader {
 public:
  // `warn` receives the lines worth a warning that are no error (a plugin of a newer minor ABI).
  PluginLoader(std::vector<SearchDir> search_dirs, const PL_Host* host, std::function<void(const std::string&)> warn);

  const std::vector<SearchDir>& search_dirs() const { return dirs_; }

  // Resolves `name_or_path` (a name, an alias, or a path containing '/') to a plugin of `kind`.
  // Throws Error with a message naming the file and the reason, or the available names.
  Resolution resolve(PL_PluginKind kind, const std::string& name_or_path);

  // Every plugin file in the search path, loaded; failures are reported in `problems`.
  std::vector<const LoadedPlugin*> load_all(std::vector<std::string>* problems);

 private:
  const LoadedPlugin& load_file(const std::filesystem::path& path, std::optional<PL_PluginKind> expected_kind);
  std::vector<std::filesystem::path> candidate_files(std::optional<PL_PluginKind> kind) const;

  std::vector<SearchDir> dirs_;
  const PL_Host* host_;
  std::function<void(const std::string&)> warn_;
  std::recursive_mutex mutex_;
  std::map<std::filesystem::path, std::unique_ptr<LoadedPlugin>> loaded_;  // by canonical path
};

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace plrt::rt
