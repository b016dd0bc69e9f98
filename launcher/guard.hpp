// plrun's guard: the process that the user, a terminal and SLURM see as plrun, so that no process
// of the job outlives plrun, even a plrun killed by SIGKILL.  PR_SET_PDEATHSIG reaches only a
// dying process's direct children, and a worker's own children would be left running; so plrun
// splits in two at the start of a launch:
//
//   guard (plrun's pid)       single-threaded; a child subreaper.  It relays SIGINT, SIGTERM,
//    |                        SIGHUP and SIGQUIT to the supervisor and waits for it.  When the
//    |                        supervisor ends it kills (SIGKILL) and reaps whatever was handed to
//    |                        it (the job's orphans, when the supervisor was killed), again until
//    |                        none is left, and exits with the supervisor's code (128 + signal if
//    |                        it was killed).
//   supervisor                today's plrun: the store, the workers (supervisor.hpp); a child
//    |                        subreaper too.  PR_SET_PDEATHSIG kGuardDeathSignal: when the guard
//    |                        dies it kills every worker's process group and all its children,
//    |                        again until none is left, and exits.  SIGQUIT kills it (a core
//    |                        dump, as before), and the guard cleans up.
//   workers                   each in a process group of its own, PR_SET_PDEATHSIG SIGKILL.
//
// kill -9 of the guard: the supervisor gets kGuardDeathSignal and kills the job.  kill -9 of the
// supervisor: the workers die of their PR_SET_PDEATHSIG, and every orphan (the workers' children)
// is handed to the guard, which kills them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

namespace plrt::launcher {

struct GuardSplit {
  std::optional<int> guard_exit;  // in the guard, once the supervisor ended: the code to exit with
  pid_t guard = 0;                // in the supervisor: the guard's pid (for SignalChannel)
};

// Call first in the launch path, before any thread exists.  Forks: the parent is the guard and
// returns only when the supervisor and every process handed to it are gone (`sweep` at most for
// those; a process that does not die of SIGKILL is reported on stderr and left); the child
// returns at once, with the signals SignalChannel handles blocked and PR_SET_PDEATHSIG set.
// Throws pl::Error when fork fails.
GuardSplit start_guard(std::chrono::milliseconds sweep = std::chrono::seconds(5));

}  // namespace plrt::launcher
