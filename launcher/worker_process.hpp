// Starting one worker process: fork + exec with everything prepared beforehand, because plrun's
// supervisor has threads (the store's) and a forked child may then only make async-signal-safe
// calls.  The workers are the supervisor's children, the lowest level of plrun's process tree
// (guard, supervisor, workers: see guard.hpp); what they start is handed to the supervisor when
// they end (a subreaper, see process_tree.hpp).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace plrt::launcher {

// Finds `program` as execvp would, before anything starts, so that a typo is a clear error rather
// than N failed workers: a name with a '/' is taken as it is, any other is looked up in `path`
// (PATH; unset: the system default).  Returns the file to execute.  Throws pl::Error naming the
// program: PL_ERR_NOT_FOUND (no such file) or PL_ERR_INVALID_ARGUMENT (not an executable file).
std::string find_program(const std::string& program, const std::optional<std::string>& path);

struct ExecImage {
  std::string path;               // from find_program
  std::vector<std::string> argv;  // argv[0] as the user gave it
  std::vector<std::string> env;   // "NAME=value"
};

struct StartedWorker {
  pid_t pid = -1;   // also its process group's id
  int out_fd = -1;  // the read ends of its stdout and stderr pipes (non-blocking, close-on-exec)
  int err_fd = -1;
  int exec_errno = 0;  // nonzero: exec failed with this errno; the child was reaped, no fds are open
};

// Starts `image` in a new process group of its own, so that a terminal's Ctrl-C reaches plrun
// alone (which forwards it): the workers are stopped in order and never twice.  The worker gets
// SIGKILL if the supervisor dies (PR_SET_PDEATHSIG; its own children are then handed to plrun's
// guard, which kills them), stdin from /dev/null (a background process group must not read the
// terminal), stdout and stderr into pipes, default handling of the signals plrun forwards and an
// empty signal mask.  Throws pl::Error when the system refuses (pipe, fork).
StartedWorker start_worker(const ExecImage& image);

}  // namespace plrt::launcher
