/*
 * plrt plugin ABI: the plugin descriptor and the entry point.  Plain C99.  Include this one
 * header to write a plugin.
 *
 * A plugin is a shared library named  libplrt_<kind>_<name>.so  (kind: accelerator,
 * process_group, strategy) exporting
 *
 *     PL_Error* pl_plugin_entry_v1(const PL_Host* host, const PL_Plugin** out);
 *     uint32_t  pl_plugin_abi_version(void);   -- (major << 16) | minor, in every major version
 *
 * The entry checks the host (it may refuse it with an error made by host->error_new) and points
 * *out at the plugin's static descriptor.  It must not keep `host` in a global: per-runtime state
 * belongs to the instances that the kind's `create` makes.  PL_DEFINE_PLUGIN does all of this.
 */
#ifndef PLRT_PL_PLUGIN_H_
#define PLRT_PL_PLUGIN_H_

#include "pl_abi.h"
#include "pl_accelerator.h"
#include "pl_host.h"
#include "pl_process_group.h"
#include "pl_store.h"
#include "pl_strategy.h"
#include "pl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Another name for a plugin, with preset options (Lightning's "ddp_find_unused_parameters_false"). */
typedef struct PL_Alias {
  size_t struct_size;
  const char* name;        /* static */
  const char* description; /* static */
  PL_OptionList presets;   /* static */
} PL_Alias;

typedef struct PL_Plugin {
  size_t struct_size;
  int32_t abi_major; /* PL_ABI_MAJOR as the plugin was compiled */
  int32_t abi_minor; /* PL_ABI_MINOR as the plugin was compiled */
  PL_PluginKind kind;
  const char* name;        /* static; must equal the <name> in the file name */
  const char* version;     /* static; the plugin's own version, e.g. "0.1.0" */
  const char* description; /* static; one line */
  const PL_Alias* aliases; /* static; num_aliases entries, may be NULL */
  size_t num_aliases;
  /* static: a PL_AcceleratorApi, PL_ProcessGroupApi or PL_StrategyApi, as `kind` says */
  const void* api;
} PL_Plugin;

typedef PL_Error* (*PL_PluginEntryFn)(const PL_Host* host, const PL_Plugin** out);
typedef uint32_t (*PL_PluginAbiVersionFn)(void);

#define PL_PLUGIN_ENTRY_SYMBOL "pl_plugin_entry_v1"
#define PL_PLUGIN_ABI_VERSION_SYMBOL "pl_plugin_abi_version"
#define PL_PLUGIN_FILE_PREFIX "libplrt_"

/* The smallest host table a v1 plugin may rely on. */
#define PL_HOST_MIN_SIZE PL_STRUCT_SIZE(PL_Host, store_api)

/* Exports the two entry symbols for the static PL_Plugin `descriptor`.  The generated entry
 * refuses a host of another major version or with a table too small for this header. */
#ifdef __cplusplus
#define PL_EXTERN_C extern "C"
#else
#define PL_EXTERN_C
#endif
#define PL_DEFINE_PLUGIN(descriptor)                                                               \
  PL_EXTERN_C PL_EXPORT uint32_t pl_plugin_abi_version(void) {                                     \
    return ((uint32_t)PL_ABI_MAJOR << 16) | (uint32_t)PL_ABI_MINOR;                                \
  }                                                                                                \
  PL_EXTERN_C PL_EXPORT PL_Error* pl_plugin_entry_v1(const PL_Host* host, const PL_Plugin** out) { \
    if (host == NULL || out == NULL) return NULL;                                                  \
    if (host->struct_size < PL_HOST_MIN_SIZE || host->abi_major != PL_ABI_MAJOR) {                 \
      *out = NULL;                                                                                 \
      if (host->struct_size >= PL_STRUCT_SIZE(PL_Host, error_new) && host->error_new)              \
        return host->error_new(PL_ERR_VERSION, "the plugin needs a plrt v1 host table");           \
      return NULL;                                                                                 \
    }                                                                                              \
    *out = &(descriptor);                                                                          \
    return NULL;                                                                                   \
  }

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_PLUGIN_H_ */
