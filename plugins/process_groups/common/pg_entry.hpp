// The boundary of a process-group plugin's exported functions, shared by every backend: the NULL
// instance check, the exception guard, and the set_timeout / abort entries, which only touch the
// core.  `PG` is the backend's PL_ProcessGroup: it has `host`, `core` and a static `kBackend`.
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdint>
#include <string>
#include <utility>

#include "group_core.hpp"
#include "plugin_support.hpp"

namespace plrt::pg {

// A NULL instance breaks ABI rule 7 and leaves no host to report through: say so on stderr, abort.
[[noreturn]] void broken_call(const char* backend, const char* fn);

// guard() with the instance's host.
template <class PG, class Body>
PL_Error* entry(PG* pg, const char* fn, Body&& body) noexcept {
  if (pg == nullptr || pg->host == nullptr) broken_call(PG::kBackend, fn);
  return plugin::guard(pg->host, std::forward<Body>(body));
}

// "gloo allreduce": how a backend's argument errors begin.
inline std::string where(const char* backend, const char* op) { return std::string(backend) + " " + op; }

template <class PG>
PL_Error* set_timeout_entry(PG* pg, int64_t timeout_ms) {
  return entry(pg, "set_timeout", [&] { pg->core->set_timeout(timeout_ms); });
}

template <class PG>
PL_Error* abort_entry(PG* pg) {
  return entry(pg, "abort", [&] { pg->core->abort("aborted by the caller"); });
}

}  // namespace plrt::pg

// A backend's function table and descriptor, kApi and kPlugin, made in the namespace where its
// entry points live under the names below (pg_create, allreduce, ..., all_to_all); the rest is plrt_pg_core's.
#define PLRT_PROCESS_GROUP_PLUGIN(NAME, VERSION, DESCRIPTION)                      \
  const PL_ProcessGroupApi kApi = {sizeof(PL_ProcessGroupApi),                     \
                                   pg_create,                                      \
                                   pg_destroy,                                     \
                                   allreduce,                                      \
                                   broadcast,                                      \
                                   allgather,                                      \
                                   reduce_scatter,                                 \
                                   barrier,                                        \
                                   send,                                           \
                                   recv,                                           \
                                   ::plrt::pg::GroupCore::work_wait,               \
                                   ::plrt::pg::GroupCore::work_test,               \
                                   ::plrt::pg::GroupCore::work_destroy,            \
                                   ::plrt::pg::set_timeout_entry<PL_ProcessGroup>, \
                                   ::plrt::pg::abort_entry<PL_ProcessGroup>,       \
                                   all_to_all};                                    \
  const PL_Plugin kPlugin = {sizeof(PL_Plugin),                                    \
                             PL_ABI_MAJOR,                                         \
                             PL_ABI_MINOR,                                         \
                             PL_PLUGIN_PROCESS_GROUP,                              \
                             NAME,                                                 \
                             VERSION,                                              \
                             DESCRIPTION,                                          \
                             nullptr,                                              \
                             0,                                                    \
                             &kApi}
