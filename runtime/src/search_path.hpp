// The plugin search path: the folders a runtime looks in for plugins, in order, and why each one
// is there.  No folder is compiled in: a runtime finds its own plugins beside itself
// (<folder of libplrt_runtime.so>/plrt/plugins), so an installed, copied or relocated runtime never
// looks into the build tree it came from (in a build tree that folder is build/<preset>/lib/plrt/plugins).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace plrt::rt {

// Where a folder of the search path came from (named in the "not found" error).
enum class DirOrigin {
  explicit_option,  // PL_RuntimeOptions.plugin_dirs (plrun --plugin-path)
  beside_runtime,   // <folder of libplrt_runtime.so>/plrt/plugins
  env               // PL_PLUGIN_PATH
};

struct SearchDir {
  std::filesystem::path path;
  DirOrigin origin;
};

// "plugin_dirs", "beside libplrt_runtime.so", "PL_PLUGIN_PATH".
const char* origin_name(DirOrigin origin);

// <folder of the runtime library, symbolic links resolved>/plrt/plugins; empty when the library's
// location cannot be found.
std::filesystem::path runtime_plugin_dir();

// The search path: the explicit folders in order, then (use_defaults) the folder beside the
// runtime library, then (use_env) PL_PLUGIN_PATH's entries (colon-separated; empty entries
// skipped); a folder named twice keeps its first place.  An explicit folder that is empty, does
// not exist or is not a folder is bad input: Error(PL_ERR_INVALID_ARGUMENT) naming it.  A
// PL_PLUGIN_PATH entry that is not a folder stays in the path (it may appear later, as PATH's
// entries may) with a line in `warnings`.
std::vector<SearchDir> plugin_search_path(const std::vector<std::string>& explicit_dirs, bool use_env,
                                          bool use_defaults, std::vector<std::string>* warnings);

}  // namespace plrt::rt
