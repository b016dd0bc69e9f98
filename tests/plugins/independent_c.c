/*
 * A third-party strategy plugin written in C99 against the plugin headers alone, built by the
 * tests: "independent_c" trains each process on its own (no gradient exchange) and scales its
 * gradients by the option grad_scale.  Its alias "independent_c_half" presets grad_scale=0.5, and
 * the option "launch" picks how its workers start (process_per_device, spawn, single_process).
 */
#include <plrt/pl_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct PL_Strategy {
  const PL_Host* host;
  double grad_scale;
  int32_t sync_enabled;
  PL_Parameter* params;
  size_t num_params;
  int64_t steps;
};

static PL_Error* parse_launch(const PL_OptionList* options, PL_LaunchMode* mode) {
  size_t i;
  *mode = PL_LAUNCH_PROCESS_PER_DEVICE;
  if (options == NULL) return NULL;
  for (i = 0; i < options->count; ++i) {
    const char* v = options->items[i].value;
    if (strcmp(options->items[i].key, "launch") != 0) continue;
    if (strcmp(v, "process_per_device") == 0) *mode = PL_LAUNCH_PROCESS_PER_DEVICE;
    else if (strcmp(v, "spawn") == 0) *mode = PL_LAUNCH_SPAWN;
    else if (strcmp(v, "single_process") == 0) *mode = PL_LAUNCH_SINGLE_PROCESS;
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
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, "independent_c: out of memory");
  s->host = host;
  s->grad_scale = 1.0;
  s->sync_enabled = 1;
  for (i = 0; i < config->options.count; ++i) {
    const PL_Option* o = &config->options.items[i];
    if (strcmp(o->key, "grad_scale") == 0) {
      char* end = NULL;
      s->grad_scale = strtod(o->value, &end);
      if (end == o->value || *end != '\0') {
        snprintf(msg, sizeof msg, "independent_c: grad_scale='%s' is not a number", o->value);
        free(s);
        return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
      }
    } else if (strcmp(o->key, "launch") != 0) {
      snprintf(msg, sizeof msg, "independent_c: unknown option '%s' (valid: grad_scale, launch)", o->key);
      free(s);
      return host->error_new(PL_ERR_INVALID_ARGUMENT, msg);
    }
  }
  host->log(host->ctx, PL_LOG_INFO, "independent_c", "created");
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
    if (g->dtype != PL_F32) return s->host->error_new(PL_ERR_UNSUPPORTED, "independent_c: float32 gradients only");
    for (j = 0; j < g->numel; ++j) ((float*)g->data)[j] *= (float)s->grad_scale;
  }
  return NULL;
}

static PL_Error* ic_teardown(PL_Strategy* s) {
  s->params = NULL;
  s->num_params = 0;
  return NULL;
}

static PL_Error* ic_set_grad_sync(PL_Strategy* s, int32_t enabled) {
  s->sync_enabled = enabled;
  return NULL;
}

static const PL_StrategyApi kApi = {
    sizeof(PL_StrategyApi), ic_launch_info, ic_create, ic_destroy, ic_setup, ic_run_step,
    ic_after_backward, ic_teardown, NULL, ic_set_grad_sync, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL};

static const PL_Option kHalf[] = {{sizeof(PL_Option), "grad_scale", "0.5"}};
static const PL_Alias kAliases[] = {
    {sizeof(PL_Alias), "independent_c_half", "independent_c with grad_scale=0.5", {sizeof(PL_OptionList), kHalf, 1}}};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY,
                                  "independent_c", "1.2.3", "Example C strategy: independent replicas",
                                  kAliases, 1, &kApi};

PL_DEFINE_PLUGIN(kPlugin)
