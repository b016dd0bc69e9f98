// The C boundary as every C++ strategy family (plrt_ddp_core, plrt_dp_core) writes it: each exported
// entry checks its instance and runs its body under plugin::guard (no exception crosses the ABI);
// destroy, create and launch_info; and the argument checks and the get_stat lookup whose messages
// are the same in every family.  `family` ("ddp", "dp") names the library in the one message that
// has no instance to take a name from.
#pragma once

#include <exception>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "plugin_support.hpp"

namespace plrt::strategy {

// A NULL instance breaks ABI rule 7 and leaves no host to report through: says so on stderr
// ("plrt <family> strategy: <fn> called with a NULL strategy; aborting") and stops.
[[noreturn]] void broken_call(const char* family, const char* fn);

// The opaque PL_Strategy* of a family's C++ instance.  No family defines struct PL_Strategy (two
// families linked into one plugin, as ddp2 links ddp's, would each need their own): each converts
// at its C boundary, and a pointer made by handle() is only ever read back by as() of that family.
template <class S>
S* as(PL_Strategy* s) {
  return reinterpret_cast<S*>(s);
}
template <class S>
PL_Strategy* handle(S* s) {
  return reinterpret_cast<PL_Strategy*>(s);
}

// body(*s) under plugin::guard.  S is the family's instance: it has `host`.
template <class S, class Body>
PL_Error* entry(S* s, const char* family, const char* fn, Body&& body) noexcept {
  if (s == nullptr || s->host == nullptr) broken_call(family, fn);
  return plugin::guard(s->host, [&] { body(*s); });
}

// destroy: teardown(*s) (a failure is only logged: destroy reports nothing), then delete s.
template <class S, class Teardown>
void destroy(S* s, Teardown&& teardown) noexcept {
  if (s == nullptr) return;
  try {
    teardown(*s);
  } catch (const std::exception& e) {
    plugin::logf(s->host, PL_LOG_WARN, s->who.c_str(), "destroy: teardown failed: %s", e.what());
  } catch (...) {
  }
  delete s;
}

// create: *out = make() (the new instance, as PL_Strategy*), or NULL with the error.
template <class Make>
PL_Error* create(const char* family, const char* who, const PL_Host* host, PL_Strategy** out, Make&& make) noexcept {
  if (host == nullptr) broken_call(family, "create (host)");
  return plugin::guard(host, [&] {
    if (out == nullptr) plugin::fail(PL_ERR_INVALID_ARGUMENT, std::string(who) + ": create: out is NULL");
    *out = nullptr;
    *out = make();
  });
}

// launch_info: no option changes how workers start, so the answer is fixed per plugin.  A table
// too small to answer is left alone.
PL_Error* fill_launch_info(PL_LaunchMode mode, bool needs_process_group, int32_t max_devices_per_process,
                           PL_LaunchInfo* out) noexcept;

// ---- launch_info's errors ----
// launch_info checks the options (presets, then the user's) before any work is done, but it takes
// no host (pl_strategy.h), and only a host makes a PL_Error.  So the plugin's entry
// (plugin_entry, through PLRT_DEFINE_STRATEGY_PLUGIN) keeps the error_new of the host that loaded
// it: that one function, never the host (rule 5: two runtimes stay apart).  error_new takes no
// context and an error object belongs to no runtime (its receiver frees it), so any runtime's
// error_new serves; the last one to load the plugin is kept.

// PL_DEFINE_PLUGIN's entry (the same checks of the host) that also keeps host->error_new.
PL_Error* plugin_entry(const PL_Host* host, const PL_Plugin* descriptor, const PL_Plugin** out) noexcept;

// The error_new kept by plugin_entry.  None yet means launch_info was reached without the entry,
// which no host can do (the table comes from the entry): says so on stderr and stops.
plugin::ErrorNewFn launch_error_new(const char* family) noexcept;

// launch_info's body(): a plugin::Failure (an unknown option, a bad value) becomes a PL_Error.
template <class Body>
PL_Error* launch_guard(const char* family, Body&& body) noexcept {
  return plugin::guard_with(launch_error_new(family), std::forward<Body>(body));
}

// run_step's `fn` must be set, with `run`.
void check_step_fn(const std::string& who, const PL_ReplicaStepFn* fn);
// process_group's out-pointers must be set.
void check_process_group_outs(const std::string& who, const void* out_api, const void* out_group);

// One statistic get_stat answers.
struct Stat {
  const char* name;
  double value;
};
// get_stat's lookup: *out = the value of `name` among `stats`; an unknown name fails with
// PL_ERR_NOT_FOUND and lists the known ones in order.
void answer_stat(const std::string& who, const char* name, double* out, std::initializer_list<Stat> stats);
// The same over a list made at run time (names and values by pair).
void answer_stat(const std::string& who, const char* name, double* out,
                 const std::vector<std::pair<std::string, double>>& stats);

}  // namespace plrt::strategy
