// plrun: launches plrt jobs as torchrun does (one process per device, or one per node for the
// spawn and single-process strategies), lists plrt's plugins and resolves a job's configuration
// (Lightning's knobs).  Exit codes (pl::exit_code_for, plrt/sdk/exit_code.hpp): 0 success, 2 bad
// input (a flag CLI11 refuses, a bad value, a plugin not found or of another ABI; the error on
// stderr), 1 anything else; when it launches, the job's code (see supervisor.hpp).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/exit_code.hpp>
#include <plrt/sdk/options.hpp>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <vector>

#include "fd_limit.hpp"
#include "launcher.hpp"
#include "log_file.hpp"
#include "progress_line.hpp"

namespace {

const char* kDescription =
    "plrun: launches plrt training jobs (PyTorch Lightning's strategies for C++ programs).\n"
    "\n"
    "  plrun [job flags] [--num-nodes N --node-rank I --master-addr H --master-port P]\n"
    "        [--grace-period S] [--exit-barrier-timeout S] [--max-restarts N] [--run-id ID] [--log-dir DIR]\n"
    "        -- program args...\n"
    "  plrun --dry-run [job flags] [--assume-device-count N]\n"
    "  plrun --list-plugins [--json]\n"
    "  plrun --version\n"
    "\n"
    "job flags: --accelerator A --devices D --strategy S --precision P --process-group-backend B\n"
    "           --strategy-option KEY=VALUE (repeatable) --timeout S\n"
    "\n"
    "plrun starts one process per device (ddp), or one per node (ddp_spawn, single-device\n"
    "strategies), as torchrun does.  Each gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "NODE_RANK, GROUP_RANK, MASTER_ADDR, MASTER_PORT, PL_JOB_TOKEN, PL_USE_AGENT_STORE=1 and the\n"
    "job flags given here as PL_TRAINER_<FLAG> (e.g. PL_TRAINER_DEVICES); a spawn strategy's\n"
    "process gets PL_LAUNCH_MODE=spawn and no RANK.  The --strategy-option flags reach them as one\n"
    "JSON object, PL_TRAINER_STRATEGY_OPTIONS={\"bucket_cap_mb\":\"10\"} (a later flag overrides an\n"
    "earlier one for its key), set on top of the program's own strategy options; the strategy checks\n"
    "them before anything starts (an unknown key or a bad value: exit 2, naming the valid ones), and\n"
    "--dry-run shows them after the strategy alias's presets.  Node 0's plrun serves the rendezvous store\n"
    "for the whole job.  Output lines are prefixed \"[rank N] \" (\"[node N] \" for a process per\n"
    "node).  SIGINT, SIGTERM and SIGHUP are passed to the workers, then SIGKILL after the grace\n"
    "period; plrun exits 128+signal.  When a worker fails (or is stopped), plrun stops the others and\n"
    "exits with its code (128+signal if it was killed), or with --max-restarts N restarts every worker\n"
    "of the job, on every node, up to N times in all (counted in node 0's store); each round of\n"
    "workers gets PL_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,\n"
    "TORCHELASTIC_RUN_ID (--run-id) and PL_STORE_PREFIX (store keys of its own).  A worker's end is\n"
    "recorded in the store, so its peers' store waits and collectives fail within seconds.  No\n"
    "process of the job outlives plrun (a guard process keeps plrun's pid).  --num-nodes MIN:MAX (or\n"
    "--nnodes) makes an elastic job: node 0 serves the store and admits the others by rounds (ranks\n"
    "by join order); a node joining or leaving starts a new round at the new world size.\n"
    "\n"
    "Several nodes: run plrun on each with the same --num-nodes, --master-addr (node 0's address)\n"
    "and --master-port (default 29500), its own --node-rank, and the same PL_JOB_TOKEN in the\n"
    "environment (e.g. export PL_JOB_TOKEN=$(openssl rand -hex 16)).  One node: the store takes a\n"
    "free port on 127.0.0.1 and a fresh token unless PL_JOB_TOKEN is set.  When its workers\n"
    "succeed, node 0's plrun serves the store until every node's workers are done (at most\n"
    "--exit-barrier-timeout), so that no node loses the store before its workers finish.\n"
    "\n"
    "Preemption: on a SIGTERM (plrun's, passed on, or the workers' own) plrt's Trainer finishes its\n"
    "step, the ranks agree, it writes checkpoints/last and the program exits 143; resume with\n"
    "ckpt_path \"last\".  Workers that exit so without plrun being signalled (an eviction) end the\n"
    "round as a failure: --max-restarts restarts them and they resume from that checkpoint.\n"
    "--log-dir DIR also writes each worker's output, without the prefix, to\n"
    "DIR/<run id>/attempt_<round>/<rank, or node<k> for a process per node>/{stdout,stderr}.log\n"
    "(one attempt_<round> folder per round; the files are appended to).\n"
    "\n"
    "--devices takes Lightning's forms: 2 (the first two), -1 (all), \"1, 3\" or [1,3] (those\n"
    "indices), \"2,\" (index 2), auto.  With the cpu accelerator it is a number of processes.\n"
    "usable:N picks N CUDA devices that are free now (not prohibited, not held in exclusive mode,\n"
    "a context can be made, other processes use at most PL_USABLE_MAX_FOREIGN_MEMORY_MB (1024) MiB\n"
    "and PL_USABLE_MAX_UTILIZATION (10) percent); \"usable\" takes every free one.  plrun checks\n"
    "once and gives the workers the list (PL_TRAINER_DEVICES=[1, 3]); --dry-run shows it.\n"
    "Plugins are found by name in --plugin-path (existing folders), then plrt/plugins beside\n"
    "libplrt_runtime.so (the installed plugins), then PL_PLUGIN_PATH.  PL_LOG_LEVEL sets the log\n"
    "level (trace, debug, info, warn, error, critical, off).  plrun --version prints plrun's, the\n"
    "runtime's and the plugin ABI's versions.\n"
    "\n"
    "Exit codes: 0 success; 2 bad input, before anything starts (a flag or value plrun refuses, a\n"
    "plugin that is not found or is built for another ABI; the error names it); 1 another failure;\n"
    "once the workers run, the code of the worker that ended the job (128+N when killed by signal N),\n"
    "so a worker refusing its own input (plrt-mlp's flags, a strategy it cannot load) exits plrun 2.";

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

int list_plugins(const pl::Runtime& rt, bool as_json) {
  std::vector<std::string> problems;
  auto plugins = rt.list(&problems);
  if (as_json) {
    nlohmann::json out = nlohmann::json::object();
    out["plugins"] = nlohmann::json::array();
    for (const auto& p : plugins) {
      nlohmann::json j = {{"kind", pl::kind_name(p.kind)},
                          {"name", p.name},
                          {"version", p.version},
                          {"description", p.description},
                          {"file", p.path}};
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
  return {{"accelerator", c.accelerator}, {"devices", c.devices},
          {"strategy", c.strategy},       {"strategy_plugin", c.strategy_plugin},
          {"strategy_options", options},  {"launch", pl::launch_mode_name(c.launch_mode)},
          {"num_nodes", c.num_nodes},     {"processes_per_node", c.processes_per_node},
          {"world_size", c.world_size},   {"process_group_backend", c.process_group_backend},
          {"precision", c.precision}};
}

// The workers look for plugins where plrun did: --plugin-path first (absolute, in case a program
// changes its directory), then the inherited PL_PLUGIN_PATH.  "" leaves the inherited one.
std::string worker_plugin_path(const std::vector<std::string>& dirs) {
  if (dirs.empty()) return "";
  std::string out;
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    std::error_code ec;
    auto abs = std::filesystem::absolute(d, ec);
    out += (out.empty() ? "" : ":") + (ec ? d : abs.string());
  }
  if (const char* inherited = std::getenv("PL_PLUGIN_PATH"); inherited && *inherited)
    out += (out.empty() ? "" : ":") + std::string(inherited);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  plrt::launcher::raise_fd_limit();  // node 0 serves the store: one descriptor per connection
  CLI::App app(kDescription, "plrun");
  app.set_help_flag("-h,--help", "Print this help and exit");
  bool list = false, as_json = false, dry_run = false, version = false;
  pl::JobRequest req;
  std::string devices = "auto";
  std::vector<std::string> plugin_dirs;
  std::vector<std::string> strategy_options;  // KEY=VALUE, as given
  std::vector<std::string> command;
  plrt::launcher::LaunchOptions launch;
  int master_port = -1;
  double worker_timeout_s = 0;  // --timeout: passed on as PL_TRAINER_TIMEOUT
  app.add_flag("--version", version, "Print plrun's version, the runtime library's and its plugin ABI's, and exit");
  app.add_flag("--list-plugins", list, "List the plugins found (kind, name, version, description, file)");
  app.add_flag("--json", as_json, "With --list-plugins: print JSON");
  app.add_flag("--dry-run", dry_run, "Print the resolved configuration as JSON and exit");
  app.add_option("--accelerator", req.accelerator, "cpu, cuda (or gpu), auto")->capture_default_str();
  app.add_option("--devices", devices,
                 "Devices per node (Lightning's forms, or usable:N for N free CUDA devices); cpu: number of processes")
      ->capture_default_str();
  app.add_option("--strategy", req.strategy, "A strategy plugin's name or alias, or auto")->capture_default_str();
  app.add_option("--strategy-option", strategy_options,
                 "A strategy option KEY=VALUE, e.g. bucket_cap_mb=10 (repeatable; a later one overrides an earlier "
                 "one for its key)")
      ->allow_extra_args(false);
  std::string num_nodes_text = "1";
  app.add_option("--num-nodes,--nnodes", num_nodes_text,
                 "Number of machines N, or MIN:MAX for an elastic job (nodes may join and leave between MIN and MAX)")
      ->capture_default_str();
  app.add_option("--rdzv-last-call", launch.rdzv_last_call_s,
                 "Elastic: seconds a round stays open after its last join once MIN nodes joined")
      ->capture_default_str();
  app.add_option("--rdzv-heartbeat", launch.rdzv_heartbeat_s,
                 "Elastic: seconds between a node's heartbeats; 3 missed: the node has left")
      ->capture_default_str();
  app.add_option("--precision", req.precision, "32-true, 16-mixed, bf16-mixed")->capture_default_str();
  app.add_option("--process-group-backend", req.process_group_backend, "gloo or nccl (default: nccl on cuda)");
  app.add_option("--assume-device-count", req.assume_device_count,
                 "Validate as if the accelerator had N devices (e.g. a GPU job on a login node)");
  app.add_option("--plugin-path", plugin_dirs, "Extra plugin folder, searched first (repeatable)");
  app.add_option("--node-rank", launch.node_rank, "This node's rank, in [0, --num-nodes)")->capture_default_str();
  auto* addr_opt = app.add_option("--master-addr",
                                  "Node 0's host name or address, where it serves the store "
                                  "(default 127.0.0.1; required with several nodes)");
  app.add_option("--master-port", master_port,
                 "The store's port (default: a free one on a single node, 29500 with several)");
  app.add_option("--timeout", worker_timeout_s,
                 "Seconds each collective and store wait of the workers may take (PL_TRAINER_TIMEOUT; default "
                 "1800, PyTorch's 30 minutes): a stopped or lost rank fails the job after this long");
  app.add_option("--grace-period", launch.grace_period_s,
                 "Seconds between passing a stop signal (or SIGTERM) to the workers and SIGKILL, in [0, 5]")
      ->capture_default_str();
  app.add_option("--exit-barrier-timeout", launch.exit_barrier_timeout_s,
                 "Several nodes: seconds node 0 keeps serving the store after its workers succeeded, until "
                 "every node's have")
      ->capture_default_str();
  app.add_option("--max-restarts", launch.max_restarts,
                 "Restart every worker of the job, on every node, when one fails, up to N times in all (counted "
                 "job-wide in node 0's store)")
      ->capture_default_str();
  app.add_option("--run-id", launch.run_id, "The job's name, the same on every node (TORCHELASTIC_RUN_ID)")
      ->capture_default_str();
  std::string log_dir;
  auto* log_dir_opt = app.add_option(
      "--log-dir", log_dir,
      "Also write each worker's output to DIR/<run id>/attempt_<round>/<rank or node<k>>/{stdout,stderr}.log");
  app.add_option("command", command, "The program to launch and its arguments (after --)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::cerr << "plrun: error: " << e.what() << "\n(see plrun --help)\n";
    return pl::kExitBadInput;  // CLI11's own codes (105 to 114) would read as a failed job
  }
  if (version) {
    int32_t abi_major = 0, abi_minor = 0;
    pl_runtime_abi_version(&abi_major, &abi_minor);
    std::cout << "plrun " << PLRT_VERSION << "\nruntime " << pl_runtime_version() << " (libplrt_runtime), plugin ABI "
              << abi_major << "." << abi_minor << "\n";
    return 0;
  }
  // Every --plugin-path must be a folder: a typo is bad input, before any work (the runtime checks
  // it too; this names the flag and keeps plrun from starting its guard for nothing).
  for (const auto& dir : plugin_dirs) {
    std::error_code ec;
    const auto status = std::filesystem::status(dir, ec);
    if (!std::filesystem::is_directory(status)) {
      std::cerr << "plrun: error: --plugin-path '" << dir << "' "
                << (dir.empty()                       ? "is empty"
                    : std::filesystem::exists(status) ? "is not a folder"
                                                      : "does not exist")
                << "; give an existing folder that holds libplrt_<kind>_<name>.so files\n";
      return pl::kExitBadInput;
    }
  }
  if (log_dir_opt->count()) launch.log_dir = log_dir;
  if (addr_opt->count()) launch.master_addr = addr_opt->as<std::string>();
  if (app.count("--master-port")) launch.master_port = master_port;
  if (app.count("--timeout") && !(std::isfinite(worker_timeout_s) && worker_timeout_s > 0 && worker_timeout_s <= 1e9)) {
    std::cerr << "plrun: error: --timeout " << app.get_option("--timeout")->as<std::string>()
              << " is not valid: give seconds > 0 (each collective and store wait of the workers)\n";
    return pl::kExitBadInput;
  }
  if (req.assume_device_count < -1) {
    std::cerr << "plrun: error: --assume-device-count " << req.assume_device_count << ": must be >= 0\n";
    return pl::kExitBadInput;
  }

  try {
    for (const auto& text : strategy_options) {
      auto [key, value] = pl::parse_option_assignment("--strategy-option", text);
      pl::set_option(req.strategy_options, key, value);
    }
    req.devices = pl::Devices::from_text(devices);
    const auto nodes_range = plrt::launcher::parse_num_nodes(num_nodes_text);
    req.num_nodes = nodes_range.second;  // an elastic job is resolved (--dry-run) at its MAX
    if (list || dry_run || command.empty()) {
      pl::RuntimeOptions opts;
      opts.plugin_dirs = plugin_dirs;
      pl::Runtime rt(opts);
      if (list) return list_plugins(rt, as_json);
      if (dry_run) {
        auto config = rt.resolve(req);
        nlohmann::json j = to_json(config);
        j["command"] = command;
        if (nodes_range.first < nodes_range.second) j["min_nodes"] = nodes_range.first;  // an elastic job
        std::cout << j.dump(2) << "\n";
        return 0;
      }
      std::cerr << "plrun: error: nothing to do: give a program to launch after --, or --list-plugins or "
                   "--dry-run (see plrun --help)\n";
      return pl::kExitBadInput;
    }
    // Launching: the launcher makes its own runtime, after it has set up its signal handling.
    plrt::launcher::LaunchRequest lr;
    lr.job = req;
    lr.command = command;
    lr.plugin_dirs = plugin_dirs;
    launch.num_nodes = req.num_nodes;
    launch.min_nodes = nodes_range.first < nodes_range.second ? nodes_range.first : 0;
    // Only the flags given here reach the program (PL_TRAINER_*): its own defaults apply otherwise.
    for (const auto& [flag, name] :
         std::vector<std::pair<std::string, std::string>>{{"--accelerator", "ACCELERATOR"},
                                                          {"--devices", "DEVICES"},
                                                          {"--strategy", "STRATEGY"},
                                                          {"--num-nodes", "NUM_NODES"},
                                                          {"--precision", "PRECISION"},
                                                          {"--process-group-backend", "PROCESS_GROUP_BACKEND"},
                                                          {"--timeout", "TIMEOUT"}})
      if (app.count(flag)) launch.trainer_flags.emplace_back(name, app.get_option(flag)->as<std::string>());
    // PL_TRAINER_STRATEGY_OPTIONS (pl::kStrategyOptionsVariable): a JSON object, so that any value survives.
    if (!req.strategy_options.empty())
      launch.trainer_flags.emplace_back("STRATEGY_OPTIONS", pl::encode_options(req.strategy_options));
    launch.plugin_path = worker_plugin_path(plugin_dirs);
    launch.progress_bar_columns = plrt::launcher::terminal_columns(2);  // 0: not a terminal
    lr.options = launch;
    if (launch.log_dir) {  // before anything starts: a folder plrun cannot write to is a bad flag
      plrt::launcher::validate(launch);
      plrt::launcher::prepare_log_dir(*launch.log_dir);
    }
    return plrt::launcher::launch(lr);
  } catch (const pl::Error& e) {
    std::cerr << "plrun: error: " << e.what() << "\n";
    return pl::exit_code_for(e);
  } catch (const std::exception& e) {
    std::cerr << "plrun: error: " << e.what() << "\n";
    return pl::kExitFailure;
  }
}
