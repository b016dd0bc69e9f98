/*
 * A third-party strategy plugin written in C99 against the plugin headers alone, built by the
 * tests: "independent_c" trains each process on its own (no gradient exchange) and scales its
 * gradients by the option grad_scale.  Its alias "independent_c_half" presets grad_scale=0.5, and
 * the option "launch" picks how its workers start (process_per_device, spawn, single_process).
 *
 * The ABI 1.4 entries, each in a way a test can observe:
 *   optimizer_step  the option step=whole (default) hands the host every trainable parameter
 *                   whole; step=first_half only elements [0, numel/2) of each (the second half
 *                   never changes).  Contract breaches the host must report: step=frozen names
 *                   the first non-trainable entry, step=bad_index an entry past setup's array,
 *                   step=none returns without calling fn->step, step=twice calls it twice.
 *   agree_skip      skip=agree (default): the maximum of every rank's verdict, through the store
 *                   (its gradients are not synchronised, so an inf on one rank stays there: the
 *                   others must still skip); alone, its own.  skip=always skips every step (the
 *                   loss scale halves each time).
 *   reduce / all_gather  through the rendezvous store (no process group; independent_c_store.c):
 *                   each rank puts its bytes under "independent_c/<n>/<rank>" and reads every rank's, then reduces
 *                   them in rank order (so every rank gets the same bits).  Host memory only; alone,
 *                   the identity and a copy.  Keys stay in the store (a demonstration).
 *   teardown        reads every parameter's value once (a checksum, logged at debug level): the
 *                   memory setup lent must still be alive then, as pl_strategy.h promises.
 *   state           save_state writes "strategy.independent_c.rank<r>.txt" (its counters and a
 *                   checksum); load_state reads it back, and refuses another world size.  The
 *                   option fail_save_rank=<r> makes rank r's save_state fail once run_steps
 *                   passes fail_save_after=<n> (a rank that cannot save: the previous checkpoint
 *                   must stay whole).
 * ABI 1.7: the option lr_scale=<x> makes bind_optimizer ask the host for the learning rate times x
 * (PL_OptimizerInfo.lr_scale, written only when the host's struct is that long: a 1.6 host is
 * refused with an error naming the option); without it bind_optimizer asks nothing.
 * get_stat counts what was called: run_steps, optimizer_steps, ranges_stepped, agree_skip_calls,
 * skips, reduce_calls, all_gather_calls, restored (1 after load_state).
 *
 * Built a second time with -DIC_ABI_1_3 as "independent_c13": an ABI 1.3 plugin (abi_minor 3,
 * its table ending at setup_replica).  The 1.4 slots past its struct_size hold functions that
 * abort: a host that read past struct_size would crash the test.
 */
#include "independent_c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PL_Error* ic_fail(const PL_Strategy* s, PL_ErrorCode code, const char* message) {
  return s->host->error_new(code, message);
}

static PL_Error* parse_launch(const PL_OptionList* options, PL_LaunchMode* mode) {
  size_t i;
  *mode = PL_LAUNCH_PROCESS_PER_DEVICE;
  if (options == NULL) return NULL;
  for (i = 0; i < options->count; ++i) {
    const char* v = options->items[i].value;
    if (strcmp(options->items[i].key, "launch") != 0) continue;
    if (strcmp(v, "process_per_device") == 0)
      *mode = PL_LAUNCH_PROCESS_PER_DEVICE;
    else if (strcmp(v, "spawn") == 0)
      *mode = PL_LAUNCH_SPAWN;
    else if (strcmp(v, "single_process") == 0)
      *mode = PL_LAUNCH_SINGLE_PROCESS;
  }
  return NULL;
}

static PL_Error* ic_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  PL_LaunchMode mode;
  parse_launch(options, &mode);
  out->mode = mode;
  out->needs_process_group = 0;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 0;
  return NULL;
}

static PL_Error* ic_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  char msg[256];
  size_t i;
  struct PL_Strategy* s = (struct PL_Strategy*)calloc(1, sizeof *s);
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, IC_NAME ": out of memory");
  s->host = host;
  s->grad_scale = 1.0;
  s->sync_enabled = 1;
  s->rank = config->global_rank;
  s->world_size = config->world_size;
  s->store = config->store;
  s->timeout_ms = config->timeout_ms;
  s->fail_save_rank = -1;
  for (i = 0; i < config->options.count; ++i) {
    const PL_Option* o = &config->options.items[i];
    if (strcmp(o->key, "grad_scale") == 0) {
      char* end = NULL;
      s->grad_scale = strtod(o->value, &end);
      if (end == o->value || *end != '\0') {
        snprintf(msg, sizeof msg, IC_NAME ": grad_scale='%s' is not a number", o->value);
        free(s);
        return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
    } else if (strcmp(o->key, "step") == 0) {
      if (strcmp(o->value, "whole") == 0)
        s->step_mode = STEP_WHOLE;
      else if (strcmp(o->value, "first_half") == 0)
        s->step_mode = STEP_FIRST_HALF;
      else if (strcmp(o->value, "frozen") == 0)
        s->step_mode = STEP_FROZEN;
      else if (strcmp(o->value, "bad_index") == 0)
        s->step_mode = STEP_BAD_INDEX;
      else if (strcmp(o->value, "none") == 0)
        s->step_mode = STEP_NONE;
      else if (strcmp(o->value, "twice") == 0)
        s->step_mode = STEP_TWICE;
      else {
        snprintf(msg, sizeof msg,
                 IC_NAME ": step='%s' is not valid (whole, first_half, frozen, bad_index, none, twice)", o->value);
        free(s);
        return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
    } else if (strcmp(o->key, "skip") == 0) {
      if (strcmp(o->value, "agree") == 0)
        s->skip_always = 0;
      else if (strcmp(o->value, "always") == 0)
        s->skip_always = 1;
      else {
        snprintf(msg, sizeof msg, IC_NAME ": skip='%s' is not valid (agree, always)", o->value);
        free(s);
        return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
    } else if (strcmp(o->key, "fail_save_rank") == 0 || strcmp(o->key, "fail_save_after") == 0) {
      char* end = NULL;
      long long v = strtoll(o->value, &end, 10);
      if (end == o->value || *end != '\0' || v < 0) {
        snprintf(msg, sizeof msg, IC_NAME ": %s='%s' is not valid (an integer >= 0)", o->key, o->value);
        free(s);
        return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
      if (o->key[10] == 'r')
        s->fail_save_rank = (int32_t)v;
      else
        s->fail_save_after = (int64_t)v;
    } else if (strcmp(o->key, "lr_scale") == 0) {
      char* end = NULL;
      s->lr_scale = strtod(o->value, &end);
      if (end == o->value || *end != '\0' || !(s->lr_scale > 0)) {
        snprintf(msg, sizeof msg, IC_NAME ": lr_scale='%s' is not valid (a number > 0)", o->value);
        free(s);
        return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
    } else if (strcmp(o->key, "launch") != 0) {
      snprintf(msg, sizeof msg,
               IC_NAME
               ": unknown option '%s' (valid: grad_scale, launch, step, skip, fail_save_rank, fail_save_after, "
               "lr_scale)",
               o->key);
      free(s);
      return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
    }
  }
  host->log(host->ctx, PL_LOG_INFO, IC_NAME, "created");
  *out = s;
  return NULL;
}

static void ic_destroy(PL_Strategy* s) { free(s); }

static PL_Error* ic_setup(PL_Strategy* s, PL_Parameter* params, size_t n) {
  s->params = params;
  s->num_params = n;
  return NULL;
}

static PL_Error* ic_run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  PL_Device cpu;
  cpu.type = PL_DEVICE_CPU;
  cpu.index = 0;
  s->steps++;
  return fn->run(fn->user, 0, 1, cpu, s->params, s->num_params);
}

static PL_Error* ic_after_backward(PL_Strategy* s) {
  size_t i;
  int64_t j;
  if (!s->sync_enabled) return NULL;
  for (i = 0; i < s->num_params; ++i) {
    PL_Tensor* g = &s->params[i].grad;
    if (pl_parameter_kind(&s->params[i]) != PL_PARAM_TRAINABLE) continue; /* no gradient */
    if (g->dtype != PL_F32) return ic_fail(s, PL_ERR_UNSUPPORTED, IC_NAME ": float32 gradients only");
    for (j = 0; j < g->numel; ++j) ((float*)g->data)[j] *= (float)s->grad_scale;
  }
  return NULL;
}

static PL_Error* ic_teardown(PL_Strategy* s) {
  /* The borrowed memory is valid until teardown returns: a strategy may still read it here (a
   * last bucket, a final check).  This one sums the values, so that a host that freed them
   * earlier is caught by AddressSanitizer. */
  char msg[96];
  double sum = 0;
  size_t i;
  int64_t j;
  for (i = 0; i < s->num_params; ++i) {
    const PL_Tensor* v = &s->params[i].value;
    if (v->dtype != PL_F32 || v->device.type != PL_DEVICE_CPU) continue;
    for (j = 0; j < v->numel; ++j) sum += ((const float*)v->data)[j];
  }
  snprintf(msg, sizeof msg, "teardown: values sum to %.9g", sum);
  s->host->log(s->host->ctx, PL_LOG_DEBUG, IC_NAME, msg);
  s->params = NULL;
  s->num_params = 0;
  return NULL;
}

static PL_Error* ic_set_grad_sync(PL_Strategy* s, int32_t enabled) {
  s->sync_enabled = enabled;
  return NULL;
}

static PL_Error* ic_get_stat(PL_Strategy* s, const char* name, double* out) {
  char msg[256];
  if (strcmp(name, "run_steps") == 0)
    *out = (double)s->steps;
  else if (strcmp(name, "optimizer_steps") == 0)
    *out = (double)s->optimizer_steps;
  else if (strcmp(name, "ranges_stepped") == 0)
    *out = (double)s->ranges_stepped;
  else if (strcmp(name, "agree_skip_calls") == 0)
    *out = (double)s->agree_calls;
  else if (strcmp(name, "skips") == 0)
    *out = (double)s->skips;
  else if (strcmp(name, "reduce_calls") == 0)
    *out = (double)s->reduce_calls;
  else if (strcmp(name, "all_gather_calls") == 0)
    *out = (double)s->gather_calls;
  else if (strcmp(name, "restored") == 0)
    *out = (double)s->restored;
  else {
    snprintf(msg, sizeof msg,
             IC_NAME
             ": no statistic '%s' (known: run_steps, optimizer_steps, ranges_stepped, "
             "agree_skip_calls, skips, reduce_calls, all_gather_calls, restored)",
             name);
    return ic_fail(s, PL_ERR_NOT_FOUND, msg);
  }
  return NULL;
}

#ifndef IC_ABI_1_3

/* ---- ABI 1.4 ---- */

static PL_Error* ic_optimizer_step(PL_Strategy* s, const PL_OptimizerFn* fn) {
  PL_ParamRange* ranges;
  size_t i, n = 0;
  PL_Error* e;
  ranges = (PL_ParamRange*)calloc(s->num_params > 0 ? s->num_params : 1, sizeof *ranges);
  if (ranges == NULL) return ic_fail(s, PL_ERR_RESOURCE, IC_NAME ": out of memory");
  for (i = 0; i < s->num_params; ++i) {
    PL_ParamKind kind = pl_parameter_kind(&s->params[i]);
    PL_ParamRange* r;
    if (s->step_mode == STEP_FROZEN ? kind == PL_PARAM_TRAINABLE : kind != PL_PARAM_TRAINABLE) continue;
    r = &ranges[n++];
    r->struct_size = sizeof *r;
    r->param_index = i;
    r->begin = 0;
    r->end = s->step_mode == STEP_FIRST_HALF ? s->params[i].value.numel / 2 : s->params[i].value.numel;
    if (s->step_mode == STEP_FROZEN) break;
  }
  if (s->step_mode == STEP_BAD_INDEX && n > 0) ranges[n - 1].param_index = s->num_params;
  e = s->step_mode == STEP_NONE ? NULL : fn->step(fn->user, ranges, n);
  if (e == NULL && s->step_mode == STEP_TWICE) e = fn->step(fn->user, ranges, n);
  free(ranges);
  if (e == NULL) {
    s->optimizer_steps++;
    s->ranges_stepped += (int64_t)n;
  }
  return e; /* independent replicas: nothing to share after the step */
}

static PL_Error* ic_state_info(PL_Strategy* s, PL_StrategyStateInfo* out) {
  (void)s;
  out->has_state = 1;      /* the counters, per rank */
  out->any_world_size = 0; /* a rank's file belongs to that rank of that world size */
  return NULL;
}

/* FNV-1a over the text, so that a damaged file is told apart from a valid one. */
static unsigned long long checksum(const char* text, size_t n) {
  unsigned long long h = 1469598103934665603ULL;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ (unsigned char)text[i]) * 1099511628211ULL;
  return h;
}

static void state_path(const PL_Strategy* s, const char* dir, char* out, size_t size) {
  snprintf(out, size, "%s/strategy.independent_c.rank%d.txt", dir, (int)s->rank);
}

static PL_Error* ic_save_state(PL_Strategy* s, const char* dir) {
  char path[1024], body[512], msg[1200];
  FILE* f;
  int n;
  state_path(s, dir, path, sizeof path);
  if (s->rank == s->fail_save_rank && s->steps > s->fail_save_after) {
    snprintf(msg, sizeof msg, IC_NAME ": rank %d refuses to save after %lld steps (fail_save_rank)", (int)s->rank,
             (long long)s->steps);
    return ic_fail(s, PL_ERR_RUNTIME, msg);
  }
  n = snprintf(body, sizeof body, "independent_c 1\nworld_size %d\nrank %d\nrun_steps %lld\noptimizer_steps %lld\n",
               (int)s->world_size, (int)s->rank, (long long)s->steps, (long long)s->optimizer_steps);
  f = fopen(path, "w");
  if (f == NULL) {
    snprintf(msg, sizeof msg, IC_NAME ": cannot write %s", path);
    return ic_fail(s, PL_ERR_RUNTIME, msg);
  }
  fprintf(f, "%schecksum %llu\n", body, checksum(body, (size_t)n));
  if (fclose(f) != 0) {
    snprintf(msg, sizeof msg, IC_NAME ": cannot write %s", path);
    return ic_fail(s, PL_ERR_RUNTIME, msg);
  }
  return NULL;
}

static PL_Error* ic_load_state(PL_Strategy* s, const char* dir, int32_t saved_world_size) {
  char path[1024], body[512], msg[1300];
  FILE* f;
  size_t n;
  int world = 0, rank = -1, used = 0;
  long long run_steps = 0, optimizer_steps = 0;
  unsigned long long sum = 0;
  const char* tail;
  if (saved_world_size != s->world_size) {
    snprintf(msg, sizeof msg,
             IC_NAME
             ": the checkpoint was saved by %d processes and this run has %d; its per-rank "
             "state loads only at the same world size",
             (int)saved_world_size, (int)s->world_size);
    return ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  state_path(s, dir, path, sizeof path);
  f = fopen(path, "r");
  if (f == NULL) {
    snprintf(msg, sizeof msg, IC_NAME ": the checkpoint lacks this rank's state file %s", path);
    return ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  n = fread(body, 1, sizeof body - 1, f);
  fclose(f);
  body[n] = '\0';
  tail = strstr(body, "checksum ");
  if (sscanf(body, "independent_c 1\nworld_size %d\nrank %d\nrun_steps %lld\noptimizer_steps %lld\n%n", &world, &rank,
             &run_steps, &optimizer_steps, &used) != 4 ||
      tail == NULL || tail != body + used || sscanf(tail, "checksum %llu", &sum) != 1 ||
      sum != checksum(body, (size_t)used) || world != saved_world_size || rank != s->rank) {
    snprintf(msg, sizeof msg, IC_NAME ": the state file %s is damaged (its contents or checksum do not match)", path);
    return ic_fail(s, PL_ERR_INVALID_ARGUMENT, msg);
  }
  s->steps = run_steps;
  s->optimizer_steps = optimizer_steps;
  s->restored = 1;
  return NULL;
}

/* ABI 1.7: the learning rate times the option lr_scale, asked of the host (which owns the
 * optimizer).  The reason is a static string: valid while the plugin is loaded. */
static PL_Error* ic_bind_optimizer(PL_Strategy* s, PL_OptimizerInfo* info) {
  if (info == NULL) return ic_fail(s, PL_ERR_INVALID_ARGUMENT, IC_NAME ": bind_optimizer: info is NULL");
  if (s->lr_scale == 0) return NULL;
  if (!PL_HAS_FIELD(PL_OptimizerInfo, info, lr_scale_reason))
    return ic_fail(s, PL_ERR_UNSUPPORTED, IC_NAME ": option lr_scale needs a host of ABI 1.7 or later");
  info->lr_scale = s->lr_scale;
  info->lr_scale_reason = "independent_c's option lr_scale";
  return NULL;
}

#define IC_ABI_MINOR PL_ABI_MINOR
#define IC_BIND_OPTIMIZER ic_bind_optimizer
#define IC_TABLE_SIZE sizeof(PL_StrategyApi)
#define IC_14_ENTRIES \
  ic_optimizer_step, ic_agree_skip, ic_reduce, ic_all_gather, ic_state_info, ic_save_state, ic_load_state

#else /* IC_ABI_1_3: what lies past the table's struct_size must never be called */

static PL_Error* never_optimizer_step(PL_Strategy* s, const PL_OptimizerFn* fn) {
  (void)s, (void)fn;
  abort();
}
static PL_Error* never_agree_skip(PL_Strategy* s, int32_t f, int32_t* o) {
  (void)s, (void)f, (void)o;
  abort();
}
static PL_Error* never_reduce(PL_Strategy* s, PL_Tensor* t, PL_ReduceOp op) {
  (void)s, (void)t, (void)op;
  abort();
}
static PL_Error* never_all_gather(PL_Strategy* s, const PL_Tensor* i, PL_Tensor* o, size_t n) {
  (void)s, (void)i, (void)o, (void)n;
  abort();
}
static PL_Error* never_state_info(PL_Strategy* s, PL_StrategyStateInfo* o) {
  (void)s, (void)o;
  abort();
}
static PL_Error* never_save_state(PL_Strategy* s, const char* d) {
  (void)s, (void)d;
  abort();
}
static PL_Error* never_load_state(PL_Strategy* s, const char* d, int32_t w) {
  (void)s, (void)d, (void)w;
  abort();
}

#define IC_ABI_MINOR 3
#define IC_BIND_OPTIMIZER NULL /* past the 1.3 table's size */
#define IC_TABLE_SIZE PL_STRUCT_SIZE(PL_StrategyApi, setup_replica)
#define IC_14_ENTRIES                                                                                         \
  never_optimizer_step, never_agree_skip, never_reduce, never_all_gather, never_state_info, never_save_state, \
      never_load_state

#endif

static const PL_StrategyApi kApi = {IC_TABLE_SIZE,
                                    ic_launch_info,
                                    ic_create,
                                    ic_destroy,
                                    ic_setup,
                                    ic_run_step,
                                    ic_after_backward,
                                    ic_teardown,
                                    NULL,
                                    ic_set_grad_sync,
                                    NULL,
                                    NULL,
                                    NULL,
                                    ic_get_stat,
                                    NULL,
                                    NULL,
                                    IC_14_ENTRIES,
                                    NULL /* owned_ranges (1.5): no sharding */,
                                    IC_BIND_OPTIMIZER /* bind_optimizer (1.6; lr_scale: 1.7) */,
                                    NULL /* sync_weights (1.6): the ranks' weights never drift */};

static const PL_Option kHalf[] = {{sizeof(PL_Option), "grad_scale", "0.5"}};
static const PL_Alias kAliases[] = {
    {sizeof(PL_Alias), IC_NAME "_half", IC_NAME " with grad_scale=0.5", {sizeof(PL_OptionList), kHalf, 1}}};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  IC_ABI_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  IC_NAME,
                                  "1.2.3",
                                  "Example C strategy: independent replicas",
                                  kAliases,
                                  1,
                                  &kApi};

PL_DEFINE_PLUGIN(kPlugin)
