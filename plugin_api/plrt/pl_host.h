/*
 * plrt plugin ABI: the host table.  Plain C99.
 *
 * The runtime hands every plugin a PL_Host.  A plugin links to no runtime symbol (as an SQLite
 * extension calls through sqlite3_api_routines): it logs, makes errors and finds other plugins
 * through this table alone.  One runtime = one PL_Host; a plugin instance keeps the PL_Host* it
 * was created with and never stores it in a global, so two runtimes in one process stay apart.
 */
#ifndef PLRT_PL_HOST_H_
#define PLRT_PL_HOST_H_

#include "pl_abi.h"
#include "pl_store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct PL_Plugin;
typedef struct PL_HostContext PL_HostContext; /* opaque; one per runtime */

/* A plugin found by name.  Every pointer is owned by the runtime and valid until it is destroyed. */
typedef struct PL_ResolvedPlugin {
  size_t struct_size;
  const struct PL_Plugin* plugin; /* the plugin's descriptor; its `api` matches its `kind` */
  const char* requested_name;     /* the name asked for: the plugin's own name or one of its aliases */
  PL_OptionList presets;          /* the alias's preset options; empty for the plugin's own name */
  const char* path;               /* the file it was loaded from */
} PL_ResolvedPlugin;

typedef struct PL_Host {
  size_t struct_size;
  int32_t abi_major; /* PL_ABI_MAJOR as the runtime was compiled */
  int32_t abi_minor;
  PL_HostContext* ctx; /* owned by the runtime; pass it back to the calls that take it */

  /* Errors.  error_new copies `message`; the returned error is owned by the caller of the
   * function that returns it, and freed with error_destroy. */
  PL_Error* (*error_new)(PL_ErrorCode code, const char* message);
  void (*error_destroy)(PL_Error* error);
  const char* (*error_message)(const PL_Error* error); /* owned by the error */
  PL_ErrorCode (*error_code)(const PL_Error* error);

  /* Logging through the runtime's logger (spdlog; level from PL_LOG_LEVEL; rank-prefixed).
   * `source` (borrowed) names the plugin; `message` is borrowed. */
  void (*log)(PL_HostContext* ctx, PL_LogLevel level, const char* source, const char* message);
  int32_t (*log_enabled)(PL_HostContext* ctx, PL_LogLevel level);

  /* Finds a plugin of `kind` by name or alias (e.g. a strategy asking for its process group). */
  PL_Error* (*find_plugin)(PL_HostContext* ctx, PL_PluginKind kind, const char* name, PL_ResolvedPlugin* out);

  const PL_StoreApi* store_api; /* static (host); operates on the PL_Store* handed in configs */
} PL_Host;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_HOST_H_ */
