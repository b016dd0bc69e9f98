// The runtime object behind PL_Runtime: its logger, its host table and its plugin loader.
// Nothing here is process-wide; each PL_Runtime owns all of it.
#pragma once

#include <plrt/runtime.h>

#include <memory>

#include "error.hpp"
#include "logger.hpp"
#include "plugin_loader.hpp"

struct PL_HostContext {
  PL_Runtime* runtime;
};

struct PL_Runtime {
  std::shared_ptr<spdlog::logger> logger;
  PL_HostContext context{this};
  PL_Host host{};
  std::unique_ptr<plrt::rt::PluginLoader> loader;
};

namespace plrt::rt {

// Fills a PL_ResolvedPlugin from a resolution (pointers into runtime-owned storage).
void fill_resolved(const Resolution& r, PL_ResolvedPlugin* out);

// Runs `body`, turning exceptions into a PL_Error (the runtime's exported functions all use it).
template <class Body>
PL_Error* guarded(Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return make_error(e.code, e.message);
  } catch (const std::bad_alloc&) {
    return make_error(PL_ERR_RESOURCE, "out of memory");
  } catch (const std::exception& e) {
    return make_error(PL_ERR_INTERNAL, e.what());
  } catch (...) {
    return make_error(PL_ERR_INTERNAL, "unknown exception in the runtime");
  }
}

}  // namespace plrt::rt
