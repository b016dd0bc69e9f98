/*
 * The plrt runtime's public C API: create a runtime, find plugins by name, parse devices, resolve
 * a job's configuration.  Plain C99; the C++ SDK (sdk/) wraps it.
 *
 * A runtime holds no process-wide state: two runtimes in one process each have their own plugin
 * search path, logger and host table.  Every function is safe to call from any thread on distinct
 * runtimes; one runtime may be used from several threads.
 */
#ifndef PLRT_RUNTIME_H_
#define PLRT_RUNTIME_H_

#include <plrt/pl_plugin.h>
#include <plrt/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PLRT_RUNTIME_BUILDING)
#define PL_RUNTIME_API PL_EXPORT
#else
#define PL_RUNTIME_API
#endif

typedef struct PL_Runtime PL_Runtime; /* opaque; owned by its creator: pl_runtime_destroy */

/* Receives each formatted log line (borrowed for the call) instead of stderr. */
typedef void (*PL_LogCallback)(void* user, PL_LogLevel level, const char* line);

typedef struct PL_RuntimeOptions {
  size_t struct_size;
  const char* const* plugin_dirs; /* borrowed for the call; searched first, in order; each must be
                                     an existing folder, else pl_runtime_create fails with
                                     PL_ERR_INVALID_ARGUMENT naming it */
  size_t num_plugin_dirs;
  int32_t skip_env_dirs;       /* nonzero: ignore PL_PLUGIN_PATH */
  int32_t skip_default_dirs;   /* nonzero: ignore the folder beside the runtime library
                                  (<folder of libplrt_runtime.so>/plrt/plugins) */
  const char* log_level;       /* borrowed; NULL: PL_LOG_LEVEL, else "info" */
  int32_t rank;                /* log prefix "[rank N]"; < 0: from $RANK, else no prefix */
  PL_LogCallback log_callback; /* NULL: stderr */
  void* log_user;              /* borrowed; handed to log_callback */
} PL_RuntimeOptions;

/* ---- errors made by the runtime (and by plugins through PL_Host.error_new) ---- */
PL_RUNTIME_API const char* pl_error_message(const PL_Error* error); /* owned by the error */
PL_RUNTIME_API PL_ErrorCode pl_error_code(const PL_Error* error);
PL_RUNTIME_API void pl_error_destroy(PL_Error* error);
PL_RUNTIME_API PL_Error* pl_error_new(PL_ErrorCode code, const char* message);

/* ---- runtime ---- */
PL_RUNTIME_API PL_Error* pl_runtime_create(const PL_RuntimeOptions* options, PL_Runtime** out);
PL_RUNTIME_API void pl_runtime_destroy(PL_Runtime* runtime);
/* The host table the runtime hands its plugins; owned by the runtime. */
PL_RUNTIME_API const PL_Host* pl_runtime_host(PL_Runtime* runtime);
PL_RUNTIME_API void pl_runtime_log(PL_Runtime* runtime, PL_LogLevel level, const char* message);

/* Finds a plugin of `kind` by name or alias, or loads the file `name_or_path` when it contains a
 * '/'.  Search order: the options' plugin_dirs, the folder beside the runtime library
 * (<folder of libplrt_runtime.so>/plrt/plugins: the installed plugins, or build/<preset>/lib/plrt/plugins
 * in a build tree; no folder is compiled in), then PL_PLUGIN_PATH (colon-separated; an entry that is
 * not a folder is logged as a warning when the runtime is created).  The first folder that has the
 * file wins.  A plugin declaring a newer minor ABI than this runtime's is loaded with a warning
 * (pl_abi.h, rule 8).  *out's pointers are owned by the runtime. */
PL_RUNTIME_API PL_Error* pl_runtime_find_plugin(PL_Runtime* runtime, PL_PluginKind kind, const char* name_or_path,
                                                PL_ResolvedPlugin* out);

typedef struct PL_PluginListEntry {
  size_t struct_size;
  PL_PluginKind kind;
  const char* name;     /* the plugin's name, or the alias */
  const char* alias_of; /* NULL for a plugin's own name; else the plugin's name */
  const char* version;
  const char* description;
  const char* path;
} PL_PluginListEntry;

typedef struct PL_PluginListing {
  size_t struct_size;
  const PL_PluginListEntry* entries; /* sorted by kind, then name */
  size_t num_entries;
  const char* const* problems; /* files in the search path that failed to load, and why */
  size_t num_problems;
} PL_PluginListing; /* owned by the caller: pl_plugin_listing_destroy.  Its strings are valid while
                     * both the listing and the runtime live. */

PL_RUNTIME_API PL_Error* pl_runtime_list_plugins(PL_Runtime* runtime, PL_PluginListing** out);
PL_RUNTIME_API void pl_plugin_listing_destroy(PL_PluginListing* listing);

/* ---- devices, in Lightning's forms ---- */
typedef int32_t PL_DeviceSpecKind;
enum {
  PL_DEVICES_AUTO = 0,   /* "auto" */
  PL_DEVICES_INT = 1,    /* k: the first k; -1: all */
  PL_DEVICES_LIST = 2,   /* explicit indices */
  PL_DEVICES_STRING = 3, /* "3", "1, 3", "2,", "-1", "auto" */
  PL_DEVICES_FLOAT = 4,  /* always an error, named */
  PL_DEVICES_BOOL = 5,   /* always an error, named */
  PL_DEVICES_TEXT = 6    /* command-line text in `string`, read as plrun reads --devices: "2" and "-1"
                            as ints, "[1, 3]" as a list, "1.5" a float, "true" a bool, else a string */
};

typedef struct PL_DeviceSpec {
  size_t struct_size;
  PL_DeviceSpecKind kind;
  int64_t int_value;
  double float_value;
  int32_t bool_value;
  const int64_t* list; /* borrowed for the call */
  size_t list_len;
  const char* string; /* borrowed for the call */
} PL_DeviceSpec;

/* Parses `spec` for accelerator `accelerator` (named in errors) with `available` devices.  When
 * devices_are_processes is nonzero the result is a process count k given as [0, k).  Writes at
 * most `capacity` ids to out_ids (may be NULL to ask only the count) and the count to *out_count. */
PL_RUNTIME_API PL_Error* pl_parse_devices(const PL_DeviceSpec* spec, const char* accelerator, int32_t available,
                                          int32_t devices_are_processes, int32_t* out_ids, size_t capacity,
                                          size_t* out_count);

/* ---- a job's configuration, as plrun --dry-run prints it ---- */
typedef struct PL_JobRequest {
  size_t struct_size;
  const char* accelerator; /* borrowed; NULL = "auto" */
  PL_DeviceSpec devices;
  const char* strategy;              /* borrowed; NULL = "auto" */
  int32_t num_nodes;                 /* >= 1 (anything else is an error) */
  const char* precision;             /* borrowed; NULL = "32-true" */
  const char* process_group_backend; /* borrowed; NULL = nccl for cuda, gloo otherwise */
  int32_t assume_device_count;       /* < 0: ask the accelerator; else pretend it has this many */
  /* Appended (a request whose struct_size ends before it has none).  Borrowed for the call: the
   * user's strategy options (plrun --strategy-option, TrainerOptions::strategy_options), applied
   * after the alias's presets; a later entry overrides an earlier one.  The strategy's launch_info
   * sees presets then these, and rejects an unknown key or a bad value (PL_ERR_INVALID_ARGUMENT,
   * naming it and what is valid) before any work is done. */
  PL_OptionList strategy_options;
} PL_JobRequest;

typedef struct PL_JobConfig {
  size_t struct_size;
  const char* accelerator; /* the plugin's name, e.g. "cpu" (owned by the config) */
  PL_DeviceType device_type;
  const int32_t* devices; /* owned by the config */
  size_t num_devices;
  const char* strategy;           /* the name asked for (or chosen by "auto") */
  const char* strategy_plugin;    /* the plugin behind it */
  PL_OptionList strategy_options; /* the alias's presets, then the request's options, a key given
                                     more than once keeping its place and its last value; owned by
                                     the config */
  PL_LaunchMode launch_mode;
  int32_t num_nodes;
  int32_t processes_per_node;
  int32_t world_size;
  const char* process_group_backend;
  const char* precision; /* normalised: "32-true", "16-mixed" or "bf16-mixed" */
} PL_JobConfig;          /* owned by the caller: pl_job_config_destroy */

PL_RUNTIME_API PL_Error* pl_runtime_resolve_job(PL_Runtime* runtime, const PL_JobRequest* request, PL_JobConfig** out);
PL_RUNTIME_API void pl_job_config_destroy(PL_JobConfig* config);

/* ---- the rendezvous store: a key-value store over TCP (PyTorch TCPStore semantics) ----
 * One process serves it (rank 0, or the launcher); every rank connects to it as a client.  Every
 * connection presents the job's token; a client with another token is refused and logged.  The
 * PL_Store* works with the table at pl_runtime_host(rt)->store_api (set, get, add, ...).
 * One PL_Store may be used from several threads at once (a thread blocked in get/wait does not
 * hold up the others).  It logs through its runtime's logger: destroy it before the runtime.
 * compare_set on an absent key with a non-empty `expected` sets nothing and returns `expected`,
 * as TCPStore does.  A get or wait that is still waiting after a second looks for
 * PL_STORE_JOB_ENDED_KEY once a second (one small request) and fails with its text once it
 * exists: a worker whose peer plrun saw exit never waits out its timeout for that peer.  Wire
 * format, limits and the handling of bad input: docs/store-protocol.md. */
typedef struct PL_TcpStoreOptions {
  size_t struct_size;
  const char* host;   /* borrowed; the address to serve on or connect to.  NULL: $MASTER_ADDR,
                         else "127.0.0.1".  The server binds this address only, never all
                         interfaces unless it is "0.0.0.0" or "::". */
  int32_t port;       /* < 0: $MASTER_PORT (an error if unset); 0 with is_server: a free port,
                         read back with pl_store_port */
  int32_t is_server;  /* nonzero: serve the store in this process (and connect to it) */
  const char* token;  /* borrowed; NULL: $PL_JOB_TOKEN.  Empty or unset: no token, with a warning */
  int64_t timeout_ms; /* connecting (with retries) and each wait; <= 0: 300 000 (5 minutes) */
  /* Appended after the first release (check with PL_HAS_FIELD; a shorter struct leaves it NULL): */
  const char* key_prefix; /* borrowed; put before every key of every call (num_keys counts every
                             key of the store).  NULL: $PL_STORE_PREFIX, else none.  plrun gives
                             each round of a job its own prefix ("plrt/round_<n>/"), so that a
                             restarted worker never reads the keys of the workers it replaces. */
} PL_TcpStoreOptions;

PL_RUNTIME_API PL_Error* pl_store_create_tcp(PL_Runtime* runtime, const PL_TcpStoreOptions* options,
                                             PL_Store** out); /* *out owned by the caller */
/* The port the store serves on or connects to (the real one when port 0 was asked); 0 for NULL. */
PL_RUNTIME_API int32_t pl_store_port(const PL_Store* store);
/* Closes the connections (and stops serving, for the server).  Must outlive its process groups,
 * and no call on it may be in flight.  NULL is ignored. */
PL_RUNTIME_API void pl_store_destroy(PL_Store* store);

/* ---- usable devices: Lightning's find_usable_cuda_devices, and more ----
 * The accelerator judges its own devices (PL_AcceleratorApi.device_status, ABI 1.4); the runtime
 * applies Lightning's num_devices rules to what it reports.  An accelerator without device_status
 * has every device that availability() counts usable.  The cuda accelerator calls a device
 * occupied when its compute mode is prohibited, when it is in exclusive mode and held by another
 * process, when a context cannot be made on it, or (through NVML, when the driver has it) when
 * other processes use more memory on it, or keep it busier, than the thresholds below; it never
 * initialises CUDA in the calling process (so that it may fork its workers afterwards): a
 * short-lived child process makes the contexts and exits.  PL_CUDA_DEVICE_TABLE=<file.json>
 * replaces its probe with a simulated machine (format: plugins/accelerators/cuda/device_table.hpp).
 * The devices forms "usable:N" and "usable" (= "usable:-1"), as PL_DEVICES_STRING or
 * PL_DEVICES_TEXT, are resolved by pl_runtime_resolve_job through this check (on the job's
 * accelerator; "auto" becomes PL_USABLE_DEFAULT_ACCELERATOR; not with assume_device_count >= 0);
 * pl_parse_devices, which sees no device, rejects them. */
#define PL_USABLE_DEFAULT_ACCELERATOR "cuda" /* what accelerator NULL (or "auto") means here */

typedef struct PL_UsableDeviceOptions {
  size_t struct_size;
  int32_t has_max_utilization;    /* nonzero: max_utilization_percent applies; else
                                     PL_USABLE_MAX_UTILIZATION, else 10 */
  double max_utilization_percent; /* in [0, 100]: a device busier than this is occupied */
  int32_t has_max_foreign_memory; /* nonzero: max_foreign_memory_mb applies; else
                                     PL_USABLE_MAX_FOREIGN_MEMORY_MB, else 1024 */
  int64_t max_foreign_memory_mb;  /* >= 0 MiB: more used by other processes is occupied */
  int64_t probe_timeout_ms;       /* <= 0: 30 000; devices that have not answered by then are
                                     reported occupied */
} PL_UsableDeviceOptions;         /* all zero (but struct_size) = the defaults */

/* Finds `num_devices` usable devices of `accelerator` (a plugin name or alias, e.g. "cuda" or
 * "gpu"; NULL = PL_USABLE_DEFAULT_ACCELERATOR): 0 -> none (nothing is asked); -1 -> every usable
 * one (possibly none); more than are visible, or fewer usable than asked -> PL_ERR_INVALID_ARGUMENT
 * naming each occupied device (index, name, why).  `options` is borrowed for the call; NULL = the
 * defaults; the fields set are passed to device_status as the options "max_utilization",
 * "max_foreign_memory_mb" and "probe_timeout_ms" (an accelerator without device_status ignores
 * them), after their ranges are checked here.  The ids (the accelerator's device indices,
 * ascending) go to out_ids, a buffer of `capacity` owned by the caller (NULL with capacity 0: count
 * only), and their number to *out_count.  A capacity smaller than the count is
 * PL_ERR_INVALID_ARGUMENT with *out_count set; num_devices (when > 0), or the number of visible
 * devices, always suffices.  Each call asks the accelerator anew. */
PL_RUNTIME_API PL_Error* pl_find_usable_devices(PL_Runtime* runtime, const char* accelerator, int32_t num_devices,
                                                const PL_UsableDeviceOptions* options, int32_t* out_ids,
                                                size_t capacity, size_t* out_count);

/* ---- versions (appended) ----
 * The version of the runtime library itself, e.g. "0.1.0" (static): PLRT_VERSION as
 * libplrt_runtime.so was compiled, which differs from the PLRT_VERSION a program was compiled
 * with when it runs with another build of the library. */
PL_RUNTIME_API const char* pl_runtime_version(void);
/* The plugin ABI this runtime speaks: PL_ABI_MAJOR and PL_ABI_MINOR as it was compiled.  Either
 * pointer may be NULL. */
PL_RUNTIME_API void pl_runtime_abi_version(int32_t* major, int32_t* minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_RUNTIME_H_ */
