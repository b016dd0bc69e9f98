// The cpu accelerator's instance, stream and event types and the boundary helpers that both of the
// plugin's sources use: cpu_accelerator.cpp (lifecycle, devices, memory, streams, the descriptor)
// and cpu_kernel_entries.cpp (the kernel entries of the table).
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "plugin_support.hpp"

struct PL_Accelerator {
  const PL_Host* host;  // borrowed; outlives the instance
};

// CPU work is synchronous: a stream or an event only remembers which instance made it, so that
// destroy frees a real object and a handle from another instance is caught.
struct PL_Stream {
  PL_Accelerator* owner;
};
struct PL_Event {
  PL_Accelerator* owner;
  bool recorded;
};

namespace plrt::cpu_plugin {

// A NULL instance (or host) leaves no way to report an error: a broken caller invariant.
[[noreturn]] inline void broken_call(const char* fn, const char* what) {
  std::fprintf(stderr, "plrt cpu accelerator: %s called with a NULL %s; aborting\n", fn, what);
  std::abort();
}

// guard() with the instance's host.
template <class Body>
PL_Error* run(PL_Accelerator* acc, const char* fn, Body&& body) {
  if (acc == nullptr || acc->host == nullptr) broken_call(fn, "accelerator instance");
  return plrt::plugin::guard(acc->host, std::forward<Body>(body));
}

inline void check_stream(PL_Accelerator* acc, const PL_Stream* s, const char* fn) {
  if (s != nullptr && s->owner != acc)
    plrt::plugin::fail(PL_ERR_INVALID_ARGUMENT,
                       std::string(fn) + ": the stream was made by another cpu accelerator instance");
}

// cpu_kernel_entries.cpp: sets every kernel entry of the table (fill .. unpack, sum_squares, clamp).
void set_kernel_entries(PL_AcceleratorApi& api);

}  // namespace plrt::cpu_plugin
