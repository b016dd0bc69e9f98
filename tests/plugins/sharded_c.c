/*
 * A sharded strategy (ZeRO stage 1, ABI 1.5) in C99 against the plugin headers alone, built by
 * the tests of sharded checkpoints (tests/training/test_sharded_checkpoint.cpp): small and plain,
 * but real.  Float32 parameters in host memory (the cpu accelerator) only.
 *
 *   partition     every trainable element in setup's order, cut into world_size contiguous chunks
 *                 whose sizes differ by at most one (the flat ZeRO partition); rank r owns chunk r:
 *                 a parameter may be split across ranks, and with more ranks than elements of a
 *                 parameter some ranks own none of it.  owned_ranges names rank r's parts.
 *   setup         rank 0's values of every entry (trainable, frozen, buffer) are broadcast.
 *   after_backward  at an accumulation boundary every trainable gradient is averaged whole
 *                 (allreduce AVG): simple, and more than owned_ranges promises.
 *   optimizer_step  the host steps this rank's ranges only (its optimizer keeps state for them
 *                 alone), then every rank's updated chunk is gathered onto every rank (allgather,
 *                 per-rank sizes), so all values agree again.
 *   reduce / all_gather  the trainer's metrics, on the same group; agree_skip is left to the
 *                 host (the maximum over process_group()).
 *   state         save_state writes "strategy.sharded_c.rank<r>.txt" (its optimizer-step counter);
 *                 load_state reads rank 0's at any world size (any_world_size).  The options
 *                 kill_save_rank=<r> and kill_save_after=<n> make rank r kill itself (SIGKILL)
 *                 inside save_state once it has taken more than n optimizer steps: a worker that
 *                 dies in the middle of a save, after the host wrote its optimizer shard into the
 *                 staging folder.
 * get_stat: optimizer_steps, owned_elements, restored (1 after load_state).
 */
#define _POSIX_C_SOURCE 200809L /* SIGKILL */
#include <plrt/pl_plugin.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SC_NAME "sharded_c"

struct PL_Strategy {
  const PL_Host* host;
  int32_t rank, world_size;
  int32_t sync_enabled;
  const PL_ProcessGroupApi* pg_api; /* static (the process-group plugin's); NULL alone */
  PL_ProcessGroup* pg;              /* owned; NULL alone */
  int32_t kill_save_rank;
  int64_t kill_save_after;
  PL_Parameter* params; /* borrowed from setup until teardown */
  size_t num_params;
  PL_ParamRange* owned; /* owned: this rank's ranges */
  size_t num_owned;
  int64_t* chunk_begin; /* owned: world_size + 1 offsets into the flat trainable elements */
  int64_t optimizer_steps, restored;
};

static PL_Error* fail(const PL_Strategy* s, PL_ErrorCode code, const char* message) {
  return s->host->error_new(code, message);
}

/* Waits for and frees the work handle a collective stored in *work (read only after the call
 * that started it: `started` is that call's result, evaluated before this function runs). */
static PL_Error* finish(PL_Strategy* s, PL_Error* started, PL_Work** work) {
  PL_Error* e;
  if (started != NULL) return started;
  e = s->pg_api->work_wait(*work, 0);
  s->pg_api->work_destroy(*work);
  return e;
}

static PL_Tensor flat_f32(float* data, int64_t n) {
  PL_Tensor t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = PL_F32;
  t.device.type = PL_DEVICE_CPU;
  t.device.index = 0;
  t.numel = n;
  t.ndim = 1;
  t.shape[0] = n;
  return t;
}

static PL_Error* sc_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  (void)options;
  out->mode = PL_LAUNCH_PROCESS_PER_DEVICE;
  out->needs_process_group = 1;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 1;
  return NULL;
}

static PL_Error* parse_count(const PL_Host* host, const PL_Option* o, long long* out) {
  char msg[256];
  char* end = NULL;
  *out = strtoll(o->value, &end, 10);
  if (end == o->value || *end != '\0' || *out < 0) {
    snprintf(msg, sizeof msg, SC_NAME ": %s='%s' is not valid (an integer >= 0)", o->key, o->value);
    return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
  }
  return NULL;
}

static void sc_destroy(PL_Strategy* s) {
  if (s == NULL) return;
  if (s->pg != NULL) s->pg_api->destroy(s->pg);
  free(s->owned);
  free(s->chunk_begin);
  free(s);
}

static PL_Error* make_group(PL_Strategy* s, const PL_StrategyConfig* config) {
  char msg[512];
  PL_ResolvedPlugin found;
  PL_ProcessGroupConfig pc;
  PL_Error* e;
  const char* backend = config->process_group_backend;
  if (backend == NULL || backend[0] == '\0') backend = "gloo";
  if (config->store == NULL)
    return fail(s, PL_ERR_INVALID_ARGUMENT, SC_NAME ": config->store is NULL with world_size > 1");
  memset(&found, 0, sizeof found);
  found.struct_size = sizeof found;
  e = s->host->find_plugin(s->host->ctx, PL_PLUGIN_PROCESS_GROUP, backend, &found);
  if (e != NULL) return e;
  if (found.plugin == NULL || found.plugin->kind != PL_PLUGIN_PROCESS_GROUP || found.plugin->api == NULL) {
    snprintf(msg, sizeof msg, SC_NAME ": '%s' is not a process-group plugin", backend);
    return fail(s, PL_ERR_INTERNAL, msg);
  }
  s->pg_api = (const PL_ProcessGroupApi*)found.plugin->api;
  if (s->pg_api->allreduce == NULL || s->pg_api->broadcast == NULL || s->pg_api->allgather == NULL) {
    snprintf(msg, sizeof msg, SC_NAME ": the process group '%s' lacks allreduce, broadcast or allgather", backend);
    return fail(s, PL_ERR_UNSUPPORTED, msg);
  }
  memset(&pc, 0, sizeof pc);
  pc.struct_size = sizeof pc;
  pc.rank = config->global_rank;
  pc.world_size = config->world_size;
  pc.store = config->store;
  pc.group_name = SC_NAME;
  pc.timeout_ms = config->timeout_ms;
  pc.device.type = PL_DEVICE_CPU;
  pc.device.index = 0;
  pc.accelerator_api = config->accelerator_api;
  pc.accelerator = config->accelerator;
  pc.options.struct_size = sizeof pc.options;
  return s->pg_api->create(s->host, &pc, &s->pg);
}

static PL_Error* sc_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  char msg[256];
  size_t i;
  long long v;
  PL_Error* e;
  struct PL_Strategy* s = (struct PL_Strategy*)calloc(1, sizeof *s);
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, SC_NAME ": out of memory");
  s->host = host;
  s->rank = config->global_rank;
  s->world_size = config->world_size;
  s->sync_enabled = 1;
  s->kill_save_rank = -1;
  for (i = 0; i < config->options.count; ++i) {
    const PL_Option* o = &config->options.items[i];
    if (strcmp(o->key, "kill_save_rank") == 0 || strcmp(o->key, "kill_save_after") == 0) {
      e = parse_count(host, o, &v);
      if (e != NULL) {
        sc_destroy(s);
        return e;
      }
      if (o->key[10] == 'r')
        s->kill_save_rank = (int32_t)v;
      else
        s->kill_save_after = (int64_t)v;
    } else {
      snprintf(msg, sizeof msg, SC_NAME ": unknown option '%s' (valid: kill_save_rank, kill_save_after)", o->key);
      sc_destroy(s);
      return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
    }
  }
  if (s->world_size > 1) {
    e = make_group(s, config);
    if (e != NULL) {
      sc_destroy(s);
      return e;
    }
  }
  *out = s;
  return NULL;
}

static int trainable(const PL_Parameter* p) { return pl_parameter_kind(p) == PL_PARAM_TRAINABLE; }

static PL_Error* sc_setup(PL_Strategy* s, PL_Parameter* params, size_t n) {
  size_t i;
  int32_t r;
  int64_t total = 0, at = 0, lo, hi;
  PL_Error* e;
  s->params = params;
  s->num_params = n;
  for (i = 0; i < n; ++i) {
    const PL_Tensor* v = &params[i].value;
    if (v->dtype != PL_F32 || v->device.type != PL_DEVICE_CPU)
      return fail(s, PL_ERR_UNSUPPORTED, SC_NAME ": float32 parameters in host memory only (accelerator cpu)");
    if (trainable(&params[i])) total += v->numel;
    if (s->pg != NULL) { /* rank 0's values everywhere */
      PL_Work* w = NULL;
      PL_Tensor t = *v;
      e = finish(s, s->pg_api->broadcast(s->pg, &t, 0, &w), &w);
      if (e != NULL) return e;
    }
  }
  s->chunk_begin = (int64_t*)calloc((size_t)s->world_size + 1, sizeof *s->chunk_begin);
  s->owned = (PL_ParamRange*)calloc(n > 0 ? n : 1, sizeof *s->owned);
  if (s->chunk_begin == NULL || s->owned == NULL) return fail(s, PL_ERR_RESOURCE, SC_NAME ": out of memory");
  for (r = 0; r <= s->world_size; ++r)
    s->chunk_begin[r] = total / s->world_size * r + (r < total % s->world_size ? r : total % s->world_size);
  lo = s->chunk_begin[s->rank];
  hi = s->chunk_begin[s->rank + 1];
  for (i = 0; i < n; ++i) {
    int64_t b, end;
    if (!trainable(&params[i])) continue;
    b = lo > at ? lo : at;
    end = hi < at + params[i].value.numel ? hi : at + params[i].value.numel;
    if (b < end) {
      PL_ParamRange* o = &s->owned[s->num_owned++];
      o->struct_size = sizeof *o;
      o->param_index = i;
      o->begin = b - at;
      o->end = end - at;
    }
    at += params[i].value.numel;
  }
  return NULL;
}

static PL_Error* sc_run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  PL_Device cpu;
  cpu.type = PL_DEVICE_CPU;
  cpu.index = 0;
  return fn->run(fn->user, 0, 1, cpu, s->params, s->num_params);
}

static PL_Error* sc_after_backward(PL_Strategy* s) {
  size_t i;
  if (!s->sync_enabled || s->pg == NULL) return NULL;
  for (i = 0; i < s->num_params; ++i) {
    PL_Work* w = NULL;
    PL_Tensor g;
    PL_Error* e;
    if (!trainable(&s->params[i])) continue;
    g = s->params[i].grad;
    e = finish(s, s->pg_api->allreduce(s->pg, &g, PL_REDUCE_AVG, &w), &w);
    if (e != NULL) return e;
  }
  return NULL;
}

static PL_Error* sc_teardown(PL_Strategy* s) {
  s->params = NULL;
  s->num_params = 0;
  return NULL;
}

static PL_Error* sc_set_grad_sync(PL_Strategy* s, int32_t enabled) {
  s->sync_enabled = enabled;
  return NULL;
}

static PL_Error* sc_process_group(PL_Strategy* s, const PL_ProcessGroupApi** api, PL_ProcessGroup** group) {
  *api = s->pg_api;
  *group = s->pg;
  return NULL;
}

static PL_Error* sc_get_stat(PL_Strategy* s, const char* name, double* out) {
  char msg[256];
  size_t i;
  if (strcmp(name, "optimizer_steps") == 0) {
    *out = (double)s->optimizer_steps;
  } else if (strcmp(name, "restored") == 0) {
    *out = (double)s->restored;
  } else if (strcmp(name, "owned_elements") == 0) {
    *out = 0;
    for (i = 0; i < s->num_owned; ++i) *out += (double)(s->owned[i].end - s->owned[i].begin);
  } else {
    snprintf(msg, sizeof msg, SC_NAME ": no statistic '%s' (known: optimizer_steps, owned_elements, restored)", name);
    return fail(s, PL_ERR_NOT_FOUND, msg);
  }
  return NULL;
}

/* Rank r's chunk of the flat trainable elements, read from (gather 0) or written to (1) the values. */
static void copy_chunk(PL_Strategy* s, int32_t r, float* buf, int write) {
  size_t i;
  int64_t at = 0, lo = s->chunk_begin[r], hi = s->chunk_begin[r + 1];
  for (i = 0; i < s->num_params; ++i) {
    float* v = (float*)s->params[i].value.data;
    int64_t n = s->params[i].value.numel, b, e;
    if (!trainable(&s->params[i])) continue;
    b = lo > at ? lo : at;
    e = hi < at + n ? hi : at + n;
    if (b < e) {
      if (write)
        memcpy(v + (b - at), buf + (b - lo), (size_t)(e - b) * sizeof(float));
      else
        memcpy(buf + (b - lo), v + (b - at), (size_t)(e - b) * sizeof(float));
    }
    at += n;
  }
}

static PL_Error* sc_optimizer_step(PL_Strategy* s, const PL_OptimizerFn* fn) {
  int32_t r;
  int64_t total;
  float* all;
  PL_Tensor* outs;
  PL_Tensor in;
  PL_Work* w = NULL;
  PL_Error* e = fn->step(fn->user, s->owned, s->num_owned);
  if (e != NULL) return e;
  s->optimizer_steps++;
  if (s->pg == NULL) return NULL;
  total = s->chunk_begin[s->world_size];
  all = (float*)malloc((size_t)(total > 0 ? total : 1) * sizeof(float));
  outs = (PL_Tensor*)calloc((size_t)s->world_size, sizeof *outs);
  if (all == NULL || outs == NULL) {
    free(all);
    free(outs);
    return fail(s, PL_ERR_RESOURCE, SC_NAME ": out of memory");
  }
  copy_chunk(s, s->rank, all + s->chunk_begin[s->rank], 0);
  for (r = 0; r < s->world_size; ++r)
    outs[r] = flat_f32(all + s->chunk_begin[r], s->chunk_begin[r + 1] - s->chunk_begin[r]);
  in = outs[s->rank];
  e = finish(s, s->pg_api->allgather(s->pg, &in, outs, (size_t)s->world_size, &w), &w);
  for (r = 0; e == NULL && r < s->world_size; ++r)
    if (r != s->rank) copy_chunk(s, r, all + s->chunk_begin[r], 1);
  free(all);
  free(outs);
  return e;
}

static PL_Error* sc_reduce(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op) {
  PL_Work* w = NULL;
  if (s->pg == NULL) return NULL;
  return finish(s, s->pg_api->allreduce(s->pg, tensor, op, &w), &w);
}

static PL_Error* sc_all_gather(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t n) {
  PL_Work* w = NULL;
  if (s->pg == NULL) {
    if (n != 1 || outputs[0].numel != input->numel || outputs[0].dtype != input->dtype)
      return fail(s, PL_ERR_INVALID_ARGUMENT, SC_NAME ": all_gather alone needs one output like the input");
    memcpy(outputs[0].data, input->data, (size_t)input->numel * pl_dtype_size(input->dtype));
    return NULL;
  }
  return finish(s, s->pg_api->allgather(s->pg, input, outputs, n, &w), &w);
}

static PL_Error* sc_state_info(PL_Strategy* s, PL_StrategyStateInfo* out) {
  (void)s;
  out->has_state = 1;
  out->any_world_size = 1;
  return NULL;
}

static PL_Error* sc_save_state(PL_Strategy* s, const char* dir) {
  char path[1024], msg[1200];
  FILE* f;
  if (s->rank == s->kill_save_rank && s->optimizer_steps > s->kill_save_after) raise(SIGKILL);
  snprintf(path, sizeof path, "%s/strategy." SC_NAME ".rank%d.txt", dir, (int)s->rank);
  f = fopen(path, "w");
  if (f == NULL || fprintf(f, SC_NAME " 1\noptimizer_steps %lld\n", (long long)s->optimizer_steps) < 0 ||
      fclose(f) != 0) {
    snprintf(msg, sizeof msg, SC_NAME ": cannot write %s", path);
    return fail(s, PL_ERR_RUNTIME, msg);
  }
  return NULL;
}

static PL_Error* sc_load_state(PL_Strategy* s, const char* dir, int32_t saved_world_size) {
  char path[1024], msg[1200];
  long long steps = -1;
  FILE* f;
  int ok;
  (void)saved_world_size; /* any world size: rank 0's counter is every rank's */
  snprintf(path, sizeof path, "%s/strategy." SC_NAME ".rank0.txt", dir);
  f = fopen(path, "r");
  if (f == NULL) {
    snprintf(msg, sizeof msg, SC_NAME ": the checkpoint lacks %s", path);
    return fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  ok = fscanf(f, SC_NAME " 1\noptimizer_steps %lld", &steps) == 1 && steps >= 0;
  fclose(f);
  if (!ok) {
    snprintf(msg, sizeof msg, SC_NAME ": the state file %s is damaged", path);
    return fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  s->optimizer_steps = steps;
  s->restored = 1;
  return NULL;
}

static PL_Error* sc_owned_ranges(PL_Strategy* s, PL_ParamRange* out, size_t capacity, size_t* out_count) {
  size_t i;
  for (i = 0; i < capacity && i < s->num_owned; ++i) {
    size_t size = out[i].struct_size;
    out[i] = s->owned[i];
    out[i].struct_size = size; /* the caller's (rule 4); the fields up to `end` are ABI 1.4's */
  }
  *out_count = s->num_owned;
  return NULL;
}

static const PL_StrategyApi kApi = {sizeof(PL_StrategyApi),
                                    sc_launch_info,
                                    sc_create,
                                    sc_destroy,
                                    sc_setup,
                                    sc_run_step,
                                    sc_after_backward,
                                    sc_teardown,
                                    NULL, /* on_grad_ready */
                                    sc_set_grad_sync,
                                    NULL, /* before_optimizer_step */
                                    NULL, /* after_optimizer_step */
                                    sc_process_group,
                                    sc_get_stat,
                                    NULL, /* num_replicas */
                                    NULL, /* setup_replica */
                                    sc_optimizer_step,
                                    NULL, /* agree_skip: the host's maximum over process_group() */
                                    sc_reduce,
                                    sc_all_gather,
                                    sc_state_info,
                                    sc_save_state,
                                    sc_load_state,
                                    sc_owned_ranges,
                                    NULL /* bind_optimizer (1.6): any optimizer */,
                                    NULL /* sync_weights (1.6): the ranks' weights never drift */};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  PL_ABI_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  SC_NAME,
                                  "0.1.0",
                                  "Test strategy: flat ZeRO-1 optimizer-state shards over a process group",
                                  NULL,
                                  0,
                                  &kApi};

PL_DEFINE_PLUGIN(kPlugin)
