// The boundary of a process-group plugin's exported functions, shared by every backend: the NULL
// instance check, the exception guard, and the set_timeout / abort entries, which only touch the
// core.  `PG` is the backend's PL_ProcessGroup: it has `host`, `core` and a static `kBackend`.
#pragma once

#include "group_core.hpp"
#include "plugin_support.hpp"

#include <cstdint>
#include <string>
#include <utility>

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
