// plrun: list plrt's plugins and resolve a job's configuration (Lightning's knobs) before
// launching it.  Exit codes: 0 success, 2 invalid input (the error on stderr), 1 anything else.
#include <plrt/sdk/runtime.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr int kExitInvalid = 2;

const char* kDescription =
    "plrun: launches plrt training jobs (PyTorch Lightning's strategies for C++ programs).\n"
    "\n"
    "  plrun --list-plugins [--json]\n"
    "  plrun --dry-run [--accelerator A] [--devices D] [--strategy S] [--num-nodes N]\n"
    "                  [--precision P] [--process-group-backend B] [--assume-device-count N]\n"
    "\n"
    "--devices takes Lightning's forms: 2 (the first two), -1 (all), \"1, 3\" or [1,3] (those\n"
    "indices), \"2,\" (index 2), auto.  With the cpu accelerator it is a number of processes.\n"
    "Plugins are found by name in --plugin-path, PL_PLUGIN_PATH, the build tree and the install\n"
    "folder.  PL_LOG_LEVEL sets the log level (trace, debug, info, warn, error, critical, off).";

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

int list_plugins(const pl::Runtime& rt, bool as_json) {
  std::vector<std::string> problems;
  auto plugins = rt.list(&problems);
  if (as_json) {
    nlohmann::json out = nlohmann::json::object();
    out["plugins"] = nlohmann::json::array();
    for (const auto& p : plugins) {
      nlohmann::json j = {{"kind", pl::kind_name(p.kind)}, {"name", p.name},         {"version", p.version},
                          {"description", p.description},  {"file", p.path}};
      j["alias_of"] = p.alias_of.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.alias_of);
      out["plugins"].push_back(j);
    }
    out["problems"] = problems;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"KIND", "NAME", "VERSION", "DESCRIPTION", "FILE"}};
  for (const auto& p : plugins) {
    std::string desc = p.alias_of.empty() ? p.description : "alias of " + p.alias_of + ": " + p.description;
    rows.push_back({pl::kind_name(p.kind), p.name, p.version, desc, p.path});
  }
  std::vector<size_t> width(5, 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) line += (i + 1 < r.size() ? pad(r[i], width[i] + 2) : r[i]);
    std::cout << line << "\n";
  }
  if (plugins.empty()) std::cout << "(no plugins found)\n";
  for (const auto& p : problems) std::cerr << "plrun: warning: " << p << "\n";
  return 0;
}

nlohmann::json to_json(const pl::JobConfig& c) {
  nlohmann::json options = nlohmann::json::object();
  for (const auto& [k, v] : c.strategy_options) options[k] = v;
  return {{"accelerator", c.accelerator},
          {"devices", c.devices},
          {"strategy", c.strategy},
          {"strategy_plugin", c.strategy_plugin},
          {"strategy_options", options},
          {"launch", pl::launch_mode_name(c.launch_mode)},
          {"num_nodes", c.num_nodes},
          {"processes_per_node", c.processes_per_node},
          {"world_size", c.world_size},
          {"process_group_backend", c.process_group_backend},
          {"precision", c.precision}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "plrun");
  app.set_help_flag("-h,--help", "Print this help and exit");
  bool list = false, as_json = false, dry_run = false;
  pl::JobRequest req;
  std::string devices = "auto";
  std::vector<std::string> plugin_dirs;
  std::vector<std::string> command;
  app.add_flag("--list-plugins", list, "List the plugins found (kind, name, version, description, file)");
  app.add_flag("--json", as_json, "With --list-plugins: print JSON");
  app.add_flag("--dry-run", dry_run, "Print the resolved configuration as JSON and exit");
  app.add_option("--accelerator", req.accelerator, "cpu, cuda (or gpu), auto")->capture_default_str();
  app.add_option("--devices", devices, "Devices per node (Lightning's forms); cpu: number of processes")
      ->capture_default_str();
  app.add_option("--strategy", req.strategy, "A strategy plugin's name or alias, or auto")->capture_default_str();
  app.add_option("--num-nodes", req.num_nodes, "Number of machines")->capture_default_str();
  app.add_option("--precision", req.precision, "32-true, 16-mixed, bf16-mixed")->capture_default_str();
  app.add_option("--process-group-backend", req.process_group_backend, "gloo or nccl (default: nccl on cuda)");
  app.add_option("--assume-device-count", req.assume_device_count,
                 "Validate as if the accelerator had N devices (e.g. a GPU job on a login node)");
  app.add_option("--plugin-path", plugin_dirs, "Extra plugin folder, searched first (repeatable)");
  app.add_option("command", command, "The program to launch and its arguments (after --)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "plrun: error: " << e.what() << "\n(see plrun --help)\n";
    return kExitInvalid;
  }
  if (req.assume_device_count < -1) {
    std::cerr << "plrun: error: --assume-device-count " << req.assume_device_count << ": must be >= 0\n";
    return kExitInvalid;
  }

  try {
    pl::RuntimeOptions opts;
    opts.plugin_dirs = plugin_dirs;
    pl::Runtime rt(opts);
    if (list) return list_plugins(rt, as_json);
    req.devices = pl::Devices::from_text(devices);
    if (dry_run) {
      auto config = rt.resolve(req);
      nlohmann::json j = to_json(config);
      j["command"] = command;
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cerr << "plrun: error: nothing to do: give --list-plugins or --dry-run (see plrun --help)\n";
    return kExitInvalid;
  } catch (const pl::Error& e) {
    std::cerr << "plrun: error: " << e.what() << "\n";
    return e.code() == PL_ERR_INVALID_ARGUMENT || e.code() == PL_ERR_NOT_FOUND ? kExitInvalid : 1;
  } catch (const std::exception& e) {
    std::cerr << "plrun: error: " << e.what() << "\n";
    return 1;
  }
}
