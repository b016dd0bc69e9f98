/*
 * The runtime's C API (runtime/include/plrt/runtime.h) as a shared library, for abidw: one function
 * per public type of runtime.h, and one exported constant per runtime function, typed by that
 * function's declaration, so that abidw records every signature (the release build of
 * libplrt_runtime.so has no debug information; its exported symbols are checked separately).
 * Its baseline is abi/runtime_api.xml (scripts/abi-check, scripts/abi-bless).  scripts/abi-check
 * fails when runtime.h declares a type or function that is not probed here.
 */
#include <plrt/runtime.h>

#define PROBE(T)                               \
  PL_EXPORT void plrt_abi_probe_##T(T* value); \
  PL_EXPORT void plrt_abi_probe_##T(T* value) { (void)value; }
#define PROBE_FN(f) PL_EXPORT __typeof__(f)* const plrt_abi_fn_##f = 0;
/* A constant's value as the length of an array type (see plugin_abi_probe.c). */
#define PROBE_CONST(c) PL_EXPORT char(*const plrt_abi_const_##c)[(c) + 1] = 0;

PROBE(PL_LogCallback)
PROBE(PL_RuntimeOptions)
PROBE(PL_PluginListEntry)
PROBE(PL_PluginListing)
PROBE(PL_DeviceSpecKind)
PROBE(PL_DeviceSpec)
PROBE(PL_JobRequest)
PROBE(PL_JobConfig)
PROBE(PL_TcpStoreOptions)
PROBE(PL_UsableDeviceOptions)

PROBE_FN(pl_error_message)
PROBE_FN(pl_error_code)
PROBE_FN(pl_error_destroy)
PROBE_FN(pl_error_new)
PROBE_FN(pl_runtime_create)
PROBE_FN(pl_runtime_destroy)
PROBE_FN(pl_runtime_host)
PROBE_FN(pl_runtime_log)
PROBE_FN(pl_runtime_find_plugin)
PROBE_FN(pl_runtime_list_plugins)
PROBE_FN(pl_plugin_listing_destroy)
PROBE_FN(pl_parse_devices)
PROBE_FN(pl_runtime_resolve_job)
PROBE_FN(pl_job_config_destroy)
PROBE_FN(pl_store_create_tcp)
PROBE_FN(pl_store_port)
PROBE_FN(pl_store_destroy)
PROBE_FN(pl_find_usable_devices)
PROBE_FN(pl_runtime_version)
PROBE_FN(pl_runtime_abi_version)

PROBE_CONST(PL_DEVICES_AUTO)
PROBE_CONST(PL_DEVICES_INT)
PROBE_CONST(PL_DEVICES_LIST)
PROBE_CONST(PL_DEVICES_STRING)
PROBE_CONST(PL_DEVICES_FLOAT)
PROBE_CONST(PL_DEVICES_BOOL)
PROBE_CONST(PL_DEVICES_TEXT)
