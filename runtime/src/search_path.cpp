// The plugin search path (see search_path.hpp): explicit folders, the folder beside the runtime
// library, PL_PLUGIN_PATH.
#include "search_path.hpp"

#include <cstdlib>
#include <set>
#include <sstream>

#include "dll_shim.hpp"
#include "error.hpp"

namespace fs = std::filesystem;

namespace plrt::rt {

const char* origin_name(DirOrigin origin) {
  switch (origin) {
    case DirOrigin::explicit_option:
      return "plugin_dirs";
    case DirOrigin::beside_runtime:
      return "beside libplrt_runtime.so";
    case DirOrigin::env:
      return "PL_PLUGIN_PATH";
  }
  return "?";
}

fs::path runtime_plugin_dir() {
  fs::path here = dll::this_library_location();
  if (here.empty()) return {};
  std::error_code ec;
  fs::path real = fs::canonical(here, ec);  // libplrt_runtime.so.0 -> the file it links to
  return (ec ? here : real).parent_path() / "plrt" / "plugins";
}

std::vector<SearchDir> plugin_search_path(const std::vector<std::string>& explicit_dirs, bool use_env,
                                          bool use_defaults, std::vector<std::string>* warnings) {
  std::vector<SearchDir> dirs;
  for (size_t i = 0; i < explicit_dirs.size(); ++i) {
    const std::string& d = explicit_dirs[i];
    const std::string which = "plugin folder '" + d + "' (plugin_dirs[" + std::to_string(i) + "], plrun --plugin-path)";
    if (d.empty())
      fail(PL_ERR_INVALID_ARGUMENT, "plugin_dirs[" + std::to_string(i) +
                                        "] (plrun --plugin-path) is empty; give an existing folder that holds "
                                        "libplrt_<kind>_<name>.so files");
    std::error_code ec;
    const auto status = fs::status(d, ec);
    if (!fs::exists(status))
      fail(PL_ERR_INVALID_ARGUMENT,
           which + " does not exist; give an existing folder that holds libplrt_<kind>_<name>.so files");
    if (!fs::is_directory(status))
      fail(PL_ERR_INVALID_ARGUMENT,
           which +
               " is not a folder; give the folder that holds libplrt_<kind>_<name>.so files (a single plugin "
               "file can be named by its path where a plugin name is asked for)");
    dirs.push_back({d, DirOrigin::explicit_option});
  }
  if (use_defaults) {
    fs::path beside = runtime_plugin_dir();
    if (!beside.empty()) dirs.push_back({beside, DirOrigin::beside_runtime});
  }
  if (use_env) {
    if (const char* env = std::getenv("PL_PLUGIN_PATH")) {
      std::stringstream ss(env);
      std::string item;
      while (std::getline(ss, item, ':')) {
        if (item.empty()) continue;
        std::error_code ec;
        const auto status = fs::status(item, ec);
        if (warnings && !fs::is_directory(status))
          warnings->push_back("PL_PLUGIN_PATH entry '" + item + "' " +
                              (fs::exists(status) ? "is not a folder" : "does not exist") +
                              "; no plugin is found there (PL_PLUGIN_PATH=" + env + ")");
        dirs.push_back({item, DirOrigin::env});
      }
    }
  }
  // A folder named twice keeps its first place (and origin).
  std::vector<SearchDir> unique;
  std::set<std::string> seen;
  for (auto& d : dirs) {
    std::error_code ec;
    fs::path key = fs::weakly_canonical(d.path, ec);
    if (seen.insert((ec ? d.path : key).string()).second) unique.push_back(std::move(d));
  }
  return unique;
}

}  // namespace plrt::rt
