/*
 * local_sgd: a strategy plugin that communicates, in plain C99 against the installed plugin
 * headers alone (an out-of-tree project: see README.md and CMakeLists.txt beside it).
 *
 * Local SGD: every rank steps its own optimizer on its own gradients (nothing is exchanged during
 * backward), and every K optimizer steps the ranks average their weights (trainable parameters and
 * buffers) with one allreduce each.  K is the option sync_every (default 4):
 *
 *     plrun --strategy local_sgd --devices 2 --strategy-option sync_every=8 -- plrt-mlp
 *
 * With sync_every=1 and plain SGD it is ddp: averaging the weights after every step averages the
 * steps, and a plain SGD step is linear in the gradient.
 *
 * The pattern every strategy that communicates follows, one section each below:
 *   1. options      one parser for launch_info and create, so bad values stop plrun before work
 *   2. the group    found by name through PL_Host, made from the config's store, the backend's
 *                   presets and the user's pg.* options; blocking calls only where its minor allows
 *   3. the host     checked once in create: what this plugin needs of it (sync_weights, ABI 1.6)
 *   4. training     setup makes the ranks agree; the strategy's own communication in the hooks
 *   5. the host's   process_group() answered, so that the host's metrics, RNG gathering and loss
 *      collectives  scaler run across ranks; reduce / all_gather / agree_skip then stay NULL
 *   6. checkpoints  sync_weights before the host reads the model; per-rank optimizer state
 */
#include <errno.h>
#include <plrt/pl_plugin.h> /* the only plrt header needed; link nothing from plrt */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LS_NAME "local_sgd"
#define LS_DEFAULT_SYNC_EVERY 4

/* Everything per runtime lives in the instance, never in a global (two runtimes in one process
 * stay apart).  Ownership of each pointer is stated, as the ABI states it on every field. */
struct PL_Strategy {
  const PL_Host* host; /* borrowed from create; outlives the instance */
  int32_t rank, world_size;
  PL_Device device; /* the one device this process drives */
  long sync_every;  /* K: optimizer steps between two weight averages */
  int64_t timeout_ms;
  const PL_ProcessGroupApi* pg_api; /* static (the process-group plugin's table); NULL alone */
  PL_ProcessGroup* pg;              /* owned (destroy frees it); NULL when the job has one rank */
  int pg_blocks;                    /* the group's plugin is ABI >= 1.1: out == NULL blocks */
  PL_Parameter* params;             /* borrowed from setup until teardown */
  size_t num_params;
  long steps_since_sync; /* optimizer steps since the weights were last made equal */
  long syncs;            /* weight averages so far (get_stat "weight_syncs") */
};

static PL_Error* fail(const PL_Strategy* s, PL_ErrorCode code, const char* message) {
  return s->host->error_new(code, message); /* the receiver frees it: never free it here */
}

/* ---- 1. options ----------------------------------------------------------------------------
 * launch_info runs before any instance (plrun's --dry-run, the job's resolution) and has no host
 * argument, yet a bad option must come back as a PL_Error that names it, so that plrun exits 2
 * before a worker starts.  Errors are made by the host, so the entry point (at the end) keeps the
 * loading host's error_new, that function only: it takes no context, so any runtime's serves. */
typedef PL_Error* (*ErrorNewFn)(PL_ErrorCode code, const char* message);
/* Read and written with the __atomic builtins (GCC and Clang; C99 has no atomics): runtimes may load
 * the plugin from several threads at once. */
static ErrorNewFn g_error_new = NULL;

/* The one parser of the options, for launch_info and create alike (they cannot disagree):
 * sync_every=<integer >= 1>, and pg.<name>=<value>, which create forwards to the process group. */
static PL_Error* parse_options(ErrorNewFn error_new, const PL_OptionList* options, long* sync_every) {
  char msg[384];
  size_t i;
  *sync_every = LS_DEFAULT_SYNC_EVERY;
  for (i = 0; options != NULL && i < options->count; ++i) {
    const PL_Option* o = &options->items[i];
    if (strcmp(o->key, "sync_every") == 0) {
      char* end = NULL;
      long v;
      errno = 0;
      v = strtol(o->value, &end, 10);
      if (end == o->value || *end != '\0' || errno == ERANGE || v < 1) {
        snprintf(msg, sizeof msg,
                 LS_NAME
                 ": sync_every='%s' is not valid: it must be an integer >= 1 (the optimizer steps "
                 "between two weight averages; 1 averages after every step)",
                 o->value);
        return error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
      *sync_every = v; /* a later entry overrides an earlier one: presets first, then the user's */
    } else if (strncmp(o->key, "pg.", 3) == 0) {
      if (o->key[3] == '\0')
        return error_new(PL_ERR_INVALID_ARGUMENT,
                         LS_NAME ": option 'pg.' names no process-group option: write pg.<name>, e.g. pg.probe_ms");
    } else {
      snprintf(msg, sizeof msg,
               LS_NAME ": unknown option '%s' (valid: sync_every, pg.<name> passed to the process group)", o->key);
      return error_new(PL_ERR_INVALID_ARGUMENT, msg);
    }
  }
  return NULL;
}

static PL_Error* ls_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  long sync_every;
  PL_Error* e;
  ErrorNewFn error_new = __atomic_load_n(&g_error_new, __ATOMIC_ACQUIRE);
  if (error_new == NULL) { /* the table comes from the entry: no host can get here without it */
    fprintf(stderr, "plrt " LS_NAME " strategy: launch_info called before pl_plugin_entry_v1; aborting\n");
    abort();
  }
  e = parse_options(error_new, options, &sync_every);
  if (e != NULL) return e;
  out->mode = PL_LAUNCH_PROCESS_PER_DEVICE; /* plrun (or torchrun, SLURM) starts one process per device */
  /* "I communicate across processes": the runtime then makes sure the backend plugin exists, and
   * the trainer expects process_group() to answer the group (it warns when it does not). */
  out->needs_process_group = 1;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 1;
  return NULL;
}

/* ---- 2. the process group --------------------------------------------------------------------
 * A strategy links to no other plugin: it finds the backend the job chose (process_group_backend:
 * "gloo", "nccl" or an alias) through PL_Host.find_plugin, and makes its own group over the
 * rendezvous store the host lends (config->store).  The options reaching the group are the
 * backend alias's presets, then the user's pg.<name> options as <name> (a later entry wins). */
static PL_Error* make_group(PL_Strategy* s, const PL_StrategyConfig* config) {
  char msg[512];
  PL_ResolvedPlugin found;
  PL_ProcessGroupConfig pc;
  PL_Option* items; /* owned here, freed below: create borrows the options for the call only */
  size_t i, n = 0;
  PL_Error* e;
  const char* backend = config->process_group_backend;
  if (backend == NULL || backend[0] == '\0') backend = s->device.type == PL_DEVICE_CUDA ? "nccl" : "gloo";
  if (config->store == NULL) {
    snprintf(msg, sizeof msg, LS_NAME ": config->store is NULL but world_size is %d: the ranks meet through the store",
             (int)s->world_size);
    return fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  memset(&found, 0, sizeof found);
  found.struct_size = sizeof found;
  e = s->host->find_plugin(s->host->ctx, PL_PLUGIN_PROCESS_GROUP, backend, &found);
  if (e != NULL) return e; /* its message names the backend and where the host looked */
  s->pg_api = found.plugin != NULL ? (const PL_ProcessGroupApi*)found.plugin->api : NULL;
  if (s->pg_api == NULL || s->pg_api->struct_size < PL_PROCESS_GROUP_API_MIN_SIZE || s->pg_api->allreduce == NULL ||
      s->pg_api->broadcast == NULL) {
    snprintf(msg, sizeof msg, LS_NAME ": the process-group plugin '%s' lacks allreduce or broadcast", backend);
    return fail(s, PL_ERR_UNSUPPORTED, msg);
  }
  /* ABI 1.1 gave out == NULL a meaning (a blocking call, run on this thread).  A caller uses a
   * minor's meaning only with a plugin that declares that minor: ask the group's own descriptor. */
  s->pg_blocks = found.plugin->abi_major == PL_ABI_MAJOR && found.plugin->abi_minor >= 1;

  items = (PL_Option*)calloc(found.presets.count + config->options.count + 1, sizeof *items);
  if (items == NULL) return fail(s, PL_ERR_RESOURCE, LS_NAME ": out of memory");
  for (i = 0; i < found.presets.count; ++i) items[n++] = found.presets.items[i];
  for (i = 0; i < config->options.count; ++i) {
    const PL_Option* o = &config->options.items[i];
    if (strncmp(o->key, "pg.", 3) != 0) continue;
    items[n].struct_size = sizeof items[n];
    items[n].key = o->key + 3; /* borrowed from the config, which outlives this call */
    items[n].value = o->value;
    ++n;
  }
  memset(&pc, 0, sizeof pc);
  pc.struct_size = sizeof pc;
  pc.rank = s->rank;
  pc.world_size = s->world_size;
  pc.store = config->store;      /* borrowed; the host keeps it alive longer than the strategy */
  pc.group_name = LS_NAME;       /* prefixes the group's store keys: unique among this job's groups */
  pc.timeout_ms = s->timeout_ms; /* bounds every collective and wait */
  pc.device = s->device;
  pc.accelerator_api = config->accelerator_api; /* lets gloo stage device tensors through host memory */
  pc.accelerator = config->accelerator;
  pc.options.struct_size = sizeof pc.options;
  pc.options.items = n > 0 ? items : NULL;
  pc.options.count = n;
  e = s->pg_api->create(s->host, &pc, &s->pg);
  free(items);
  return e;
}

/* Finishes a collective started with `started` (its result) and `w` (its handle, when it did
 * not block): waits with the group's timeout (0), frees the handle, returns the error.  A failed
 * wait aborts the group first, so nothing stays in flight (a hang is a bug, not a fallback). */
static PL_Error* finish(PL_Strategy* s, PL_Error* started, PL_Work* w) {
  PL_Error* e = started;
  if (e == NULL && w != NULL) {
    e = s->pg_api->work_wait(w, 0);
    if (e != NULL) {
      PL_Error* ae = s->pg_api->abort(s->pg);
      if (ae != NULL) s->host->error_destroy(ae); /* the wait's error is the one to report */
    }
  }
  if (w != NULL) s->pg_api->work_destroy(w);
  return e;
}

static PL_Error* broadcast_from_0(PL_Strategy* s, PL_Tensor* t) {
  PL_Work* w = NULL;
  return finish(s, s->pg_api->broadcast(s->pg, t, 0, s->pg_blocks ? NULL : &w), w);
}

static PL_Error* allreduce_avg(PL_Strategy* s, PL_Tensor* t) {
  PL_Work* w = NULL;
  return finish(s, s->pg_api->allreduce(s->pg, t, PL_REDUCE_AVG, s->pg_blocks ? NULL : &w), w);
}

/* ---- 3. create: check the config and the host, then make the group ---------------------------- */
static void ls_destroy(PL_Strategy* s) {
  if (s == NULL) return;
  if (s->pg != NULL) s->pg_api->destroy(s->pg);
  free(s);
}

static PL_Error* ls_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  char msg[256];
  struct PL_Strategy* s;
  PL_Error* e;
  long sync_every;
  *out = NULL;
  if (config->struct_size < PL_STRUCT_SIZE(PL_StrategyConfig, options))
    return host->error_new(PL_ERR_VERSION, LS_NAME ": PL_StrategyConfig is smaller than ABI 1.0's");
  /* Ranks that drift apart must be made equal before the host evaluates, saves or returns the
   * model: that call, sync_weights, is ABI 1.6.  An older host never makes it, so refuse it by
   * name rather than checkpoint one rank's weights as the model. */
  if (host->abi_minor < 6) {
    snprintf(msg, sizeof msg,
             LS_NAME
             ": needs a host of ABI 1.6 or later (sync_weights before checkpoints, validation and the end of "
             "fit); this host is ABI %d.%d",
             (int)host->abi_major, (int)host->abi_minor);
    return host->error_new(PL_ERR_VERSION, msg);
  }
  if (config->num_devices > 1) {
    snprintf(msg, sizeof msg, LS_NAME " drives one device per process but was given %lu; plrun starts one per device",
             (unsigned long)config->num_devices);
    return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
  }
  e = parse_options(host->error_new, &config->options, &sync_every);
  if (e != NULL) return e;
  s = (struct PL_Strategy*)calloc(1, sizeof *s);
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, LS_NAME ": out of memory");
  s->host = host; /* in the instance, never in a global */
  s->rank = config->global_rank;
  s->world_size = config->world_size;
  s->sync_every = sync_every;
  s->timeout_ms = config->timeout_ms > 0 ? config->timeout_ms : PL_DEFAULT_TIMEOUT_MS;
  s->device.type = config->accelerator_api != NULL ? config->accelerator_api->device_type : PL_DEVICE_CPU;
  s->device.index = config->num_devices == 1 && config->device_ids != NULL ? config->device_ids[0] : 0;
  if (s->world_size > 1) { /* alone there is nothing to average: no group, process_group() answers NULL */
    e = make_group(s, config);
    if (e != NULL) {
      ls_destroy(s);
      return e;
    }
  }
  if (s->rank == 0 && host->log_enabled(host->ctx, PL_LOG_INFO)) {
    snprintf(msg, sizeof msg, "%d rank(s) average their weights every %ld optimizer step(s)%s", (int)s->world_size,
             s->sync_every, s->pg != NULL ? "" : " (alone: never)");
    host->log(host->ctx, PL_LOG_INFO, LS_NAME, msg);
  }
  *out = s;
  return NULL;
}

/* ---- 4. training --------------------------------------------------------------------------------
 * setup: the ranks start from one model (rank 0's values of every entry).  Afterwards frozen
 * parameters never change, so only trainable parameters and buffers are averaged. */
static PL_Error* ls_setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  size_t i;
  PL_Error* e;
  s->params = params;
  s->num_params = num_params;
  s->steps_since_sync = 0;
  for (i = 0; s->pg != NULL && i < num_params; ++i) {
    PL_Tensor t = params[i].value; /* a descriptor of the host's memory: the collective writes into it */
    e = broadcast_from_0(s, &t);
    if (e != NULL) return e;
  }
  return NULL;
}

static PL_Error* ls_run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return fn->run(fn->user, 0, 1, s->device, s->params, s->num_params); /* one replica per process */
}

static PL_Error* ls_after_backward(PL_Strategy* s) {
  (void)s; /* REQUIRED, and empty: each rank's gradients stay its own */
  return NULL;
}

/* The weights of every rank, averaged in place.  Every rank calls it at the same point (the same
 * step count), with the same entries in the same order: the collectives pair up. */
static PL_Error* average_weights(PL_Strategy* s) {
  size_t i;
  PL_Error* e;
  for (i = 0; s->pg != NULL && i < s->num_params; ++i) {
    PL_Tensor t;
    if (pl_parameter_kind(&s->params[i]) == PL_PARAM_FROZEN) continue; /* equal since setup */
    t = s->params[i].value;
    e = allreduce_avg(s, &t);
    if (e != NULL) return e;
  }
  s->steps_since_sync = 0;
  s->syncs += s->pg != NULL;
  return NULL;
}

/* The host calls this after every optimizer step (also a step its loss scaler skipped, on every
 * rank alike), so the count is the same everywhere. */
static PL_Error* ls_after_optimizer_step(PL_Strategy* s) {
  if (++s->steps_since_sync < s->sync_every) return NULL;
  return average_weights(s);
}

static PL_Error* ls_teardown(PL_Strategy* s) {
  s->params = NULL; /* setup's memory is the host's again */
  s->num_params = 0;
  return NULL;
}

/* ---- 5. the host's collectives: answer process_group() ------------------------------------------
 * The host runs collectives of its own: log(sync_dist=True) and the epoch metrics, the gathering of
 * every rank's RNG state into the checkpoint, and (16-mixed) the agreement on skipping a step.  It
 * routes them through the strategy's reduce / all_gather / agree_skip entries, and where those are
 * NULL, through the group process_group() answers.  A strategy that answers neither looks to the
 * host like one that runs alone: sync_dist silently returns each rank's own value, and the
 * checkpoint holds one rank's RNG state.  So: answer the group (borrowed: the strategy keeps it),
 * and leave reduce, all_gather and agree_skip NULL.  Answer NULL only when running alone. */
static PL_Error* ls_process_group(PL_Strategy* s, const PL_ProcessGroupApi** out_api, PL_ProcessGroup** out_group) {
  *out_api = s->pg_api;
  *out_group = s->pg;
  return NULL;
}

static PL_Error* ls_get_stat(PL_Strategy* s, const char* name, double* out) {
  char msg[256];
  if (strcmp(name, "weight_syncs") == 0) {
    *out = (double)s->syncs;
  } else if (strcmp(name, "sync_every") == 0) {
    *out = (double)s->sync_every;
  } else {
    snprintf(msg, sizeof msg, LS_NAME ": no statistic '%s' (known: weight_syncs, sync_every)", name);
    return fail(s, PL_ERR_NOT_FOUND, msg);
  }
  return NULL;
}

/* ---- 6. checkpoints and the model the host reads -------------------------------------------------
 * Between two averages the ranks hold different weights.  The host calls sync_weights before it
 * validates, saves a checkpoint and ends fit, so that what it evaluates, saves and hands back is one
 * model.  The count restarts there: K steps after the weights were last made equal.  That is why
 * the counter needs no checkpoint file of its own (no save_state / load_state): a checkpoint is
 * always taken right after a sync, and every rank resumes from its one model with the count at 0. */
static PL_Error* ls_sync_weights(PL_Strategy* s) {
  if (s->steps_since_sync == 0) return NULL; /* equal already (the same on every rank) */
  return average_weights(s);
}

static PL_Error* ls_state_info(PL_Strategy* s, PL_StrategyStateInfo* out) {
  (void)s;
  out->has_state = 0;
  out->any_world_size = 1;
  /* ABI 1.6: the optimizer's state (SGD's momentum, Adam's moments) grows from each rank's own
   * gradients, so each rank's is checkpointed and resumed per rank.  Written only when the host's
   * struct carries the field (rule 3: never write past the struct_size the other side declared). */
  if (PL_HAS_FIELD(PL_StrategyStateInfo, out, local_optimizer_state)) out->local_optimizer_state = 1;
  return NULL;
}

static const PL_StrategyApi kApi = {
    sizeof(PL_StrategyApi),
    ls_launch_info,
    ls_create,
    ls_destroy,
    ls_setup,
    ls_run_step,
    ls_after_backward,
    ls_teardown,
    NULL, /* on_grad_ready: no gradient communication to overlap with backward */
    NULL, /* set_grad_sync: gradients are never synchronised, so no_sync has nothing to switch off */
    NULL, /* before_optimizer_step */
    ls_after_optimizer_step,
    ls_process_group,
    ls_get_stat,   /* ABI 1.2 */
    NULL,          /* num_replicas (1.3): one replica per process */
    NULL,          /* setup_replica */
    NULL,          /* optimizer_step (1.4): the host steps every trainable parameter whole */
    NULL,          /* agree_skip: the host's maximum over process_group() */
    NULL,          /* reduce: the host's allreduce over process_group() */
    NULL,          /* all_gather: the host's allgather over process_group() */
    ls_state_info, /* no files of its own; per-rank optimizer state (1.6 field) */
    NULL,          /* save_state */
    NULL,          /* load_state */
    NULL,          /* owned_ranges (1.5): nothing sharded */
    NULL,          /* bind_optimizer (1.6): any optimizer */
    ls_sync_weights};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  PL_ABI_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  LS_NAME, /* must equal the <name> of libplrt_strategy_<name>.so */
                                  "0.1.0",
                                  "Local SGD: each rank steps alone; the weights are averaged every sync_every steps",
                                  NULL,
                                  0,
                                  &kApi};

/* What PL_DEFINE_PLUGIN(kPlugin) exports, with the same checks of the host, plus the host's
 * error_new kept for launch_info (section 1). */
PL_EXPORT uint32_t pl_plugin_abi_version(void) { return ((uint32_t)PL_ABI_MAJOR << 16) | (uint32_t)PL_ABI_MINOR; }

PL_EXPORT PL_Error* pl_plugin_entry_v1(const PL_Host* host, const PL_Plugin** out) {
  if (host == NULL || out == NULL) return NULL;
  if (host->struct_size < PL_HOST_MIN_SIZE || host->abi_major != PL_ABI_MAJOR) {
    *out = NULL;
    if (host->struct_size >= PL_STRUCT_SIZE(PL_Host, error_new) && host->error_new)
      return host->error_new(PL_ERR_VERSION, "the plugin needs a plrt v1 host table");
    return NULL;
  }
  if (host->error_new != NULL) __atomic_store_n(&g_error_new, host->error_new, __ATOMIC_RELEASE);
  *out = &kPlugin;
  return NULL;
}
