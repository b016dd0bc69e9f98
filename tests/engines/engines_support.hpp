// Helpers of the launcher tests (tests/engines): plrt-mlp's command under Open MPI's mpirun,
// mpirun with horovodrun's variables, and torchrun, each for two processes on this machine, and
// whether a launcher's program is installed.  The runs themselves go through tests/training's
// run() (bounded, the test's own launcher variables removed).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "training_support.hpp"

namespace plrt_engines {

using plrt_training::TempDir;

// The program `name` in PATH, or std::nullopt.
inline std::optional<std::string> which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Why a test of `program` cannot run here ("" when it can).
inline std::string absent(const std::string& program) {
  return which(program) ? "" : program + " is not installed (scripts/setup.sh installs it)";
}

// A small run: 20 optimizer steps of `strategy` on two cpu processes, its weights and report under
// `dir` named after `tag`.
inline std::vector<std::string> train_args(const TempDir& dir, const std::string& tag, const std::string& strategy,
                                           const std::vector<std::string>& extra = {}) {
  auto a =
      plrt_training::mlp_args({"--strategy", strategy, "--devices", "2", "--accelerator", "cpu", "--batch-size", "8",
                               "--max-steps", "20", "--epochs", "100", "--no-checkpoint", "--root-dir", dir / tag,
                               "--save", dir / (tag + ".safetensors"), "--report", dir / (tag + ".json")});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// mpirun for `np` processes on this machine (as root too, more processes than cores allowed), each
// `-x NAME=value` of `vars` exported, then `program`.
inline std::vector<std::string> mpirun(int np, const std::vector<std::string>& vars,
                                       const std::vector<std::string>& program) {
  std::vector<std::string> a{"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", std::to_string(np)};
  for (const auto& v : vars) {
    a.push_back("-x");
    a.push_back(v);
  }
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

// horovodrun's gloo mode gives each worker HOROVOD_* only: the wrapper turns mpirun's variables
// into those (Debian has no horovodrun).
inline const char* const kAsHorovodrun =
    "export HOROVOD_RANK=$OMPI_COMM_WORLD_RANK HOROVOD_SIZE=$OMPI_COMM_WORLD_SIZE "
    "HOROVOD_LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK HOROVOD_LOCAL_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE "
    "HOROVOD_CROSS_RANK=0 HOROVOD_CROSS_SIZE=1 HOROVOD_CONTROLLER=gloo; "
    "unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE; "
    "exec \"$0\" \"$@\"";

// `program` run through `sh -c script` (the script ends with exec "$0" "$@"): what each rank sees
// can be rewritten before the program starts.
inline std::vector<std::string> through_shell(const std::string& script, const std::vector<std::string>& program) {
  std::vector<std::string> a{"sh", "-c", script};
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

// torchrun for two processes on this machine, its agent store on `port` (plrt's then on `port` + 1:
// take both from plrt_test::free_tcp_ports(2)).  Debian's torchrun 1.13 on
// Python 3.11 fails in to_map() unless -r and -t are 1 or 2 (3, both streams, fails too): -r 2
// -t 2 sends each worker's stderr to `log_dir` and, prefixed, to the test's output; its stdout
// comes straight through.
inline std::vector<std::string> torchrun(const std::string& log_dir, int port,
                                         const std::vector<std::string>& program) {
  std::vector<std::string> a{"torchrun",
                             "--nproc_per_node",
                             "2",
                             "--no_python",
                             "-r",
                             "2",
                             "-t",
                             "2",
                             "--log_dir",
                             log_dir,
                             "--master_port",
                             std::to_string(port),
                             "--monitor_interval",
                             "0.2"};
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

}  // namespace plrt_engines
