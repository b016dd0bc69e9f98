// plrun's hold on every process of the job, not only on the workers it started: its supervisor
// and its guard (guard.hpp) are child subreapers, so that what a worker leaves behind (a child
// that outlives it, a daemon in a session of its own) becomes plrun's child rather than init's.
// Its pid then stays reserved until plrun reaps it, so that plrun may signal it without ever
// hitting an unrelated process that got the same pid.  These helpers find plrun's children in
// /proc, reap them, and kill them again and again (killing one hands its own children to plrun)
// until none is left.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <vector>

namespace plrt::launcher {

// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): an orphaned descendant becomes
// its child.  Idempotent.  Throws pl::Error when the kernel refuses (before Linux 3.4).
void become_subreaper();

// The pids of the live or zombie processes whose parent is `parent`, from /proc/<pid>/stat.
std::vector<pid_t> children_of(pid_t parent);

// What waitpid said about one child: its pid and status (WIFEXITED, WIFSIGNALED, or WIFSTOPPED
// when `untraced` is set).
using ChildStatus = std::function<void(pid_t pid, int status)>;

// Collects every child of this process that has ended (and, with `untraced`, stopped) without
// waiting: waitpid(-1, WNOHANG).  Returns how many it passed to `on_status`, or -1 when this
// process has no child at all.  It reaps any child: call it only in a process whose children are
// all plrun's (the supervisor, the guard).
int reap_children(const ChildStatus& on_status, bool untraced = false);

// Kills (SIGKILL) every child of this process that `spare` does not keep, reaps them (each passed
// to `on_status`), and repeats until none but spared ones is left or `timeout` passed.  Returns
// the pids still there at the timeout (a process stuck in the kernel).  Bounded: it sleeps in
// 5 ms steps.
std::vector<pid_t> kill_children(const std::function<bool(pid_t)>& spare, const ChildStatus& on_status,
                                 std::chrono::milliseconds timeout);

}  // namespace plrt::launcher
