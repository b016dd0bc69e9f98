/*
 * single_device: one process, one device, no communication (Lightning's SingleDeviceStrategy).
 * Written in plain C99 against the plugin headers alone: it is also the reference for writing a
 * strategy plugin in C (see docs/architecture.md), including the ABI 1.4 entries as a strategy
 * that runs alone implements them: optimizer_step (every trainable parameter whole; frozen
 * parameters and buffers, told apart with pl_parameter_kind, are left alone), agree_skip (its own
 * verdict), reduce (identity) and all_gather (a copy), and state_info (no state of its own).
 * launch_info rejects options as create does (it takes none), so that plrun and the trainer refuse
 * them before any work; for that, its entry keeps the host's error_new (see g_error_new).
 */
#include <plrt/pl_plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct PL_Strategy {
  const PL_Host* host;              /* borrowed from create; outlives the instance */
  const PL_AcceleratorApi* acc_api; /* borrowed from create; outlives the instance */
  PL_Accelerator* acc;              /* borrowed from create; outlives the instance */
  PL_Device device;
  PL_Parameter* params; /* borrowed from setup until teardown */
  size_t num_params;
  PL_ParamRange* ranges; /* owned: one whole range per trainable parameter, made by setup */
  size_t num_ranges;
};

static PL_Error* invalid(const PL_Host* host, const char* message) {
  return host->error_new(PL_ERR_INVALID_ARGUMENT, message);
}

/* launch_info takes no host, yet reports bad options as a PL_Error, which only a host makes: the
 * entry (pl_plugin_entry_v1, at the end of this file) keeps the error_new of the host that loaded
 * the plugin.  Only that function, never the host (rule 5: two runtimes stay apart): error_new
 * takes no context and an error belongs to no runtime, so any runtime's serves. */
typedef PL_Error* (*ErrorNewFn)(PL_ErrorCode code, const char* message);
static ErrorNewFn g_error_new = NULL; /* read and written with __atomic_* (runtimes may load it at once) */

/* single_device takes no options: the first one given is named.  create and launch_info both ask
 * here, so they cannot disagree. */
static PL_Error* check_options(ErrorNewFn error_new, const PL_OptionList* options) {
  char msg[256];
  const char* key;
  if (options == NULL || options->count == 0) return NULL;
  key = options->items != NULL && options->items[0].key != NULL ? options->items[0].key : "(NULL)";
  snprintf(msg, sizeof msg, "single_device: unknown option '%s'; single_device takes no options (valid options: none)",
           key);
  return error_new(PL_ERR_INVALID_ARGUMENT, msg);
}

static PL_Error* sd_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  ErrorNewFn error_new = __atomic_load_n(&g_error_new, __ATOMIC_ACQUIRE);
  PL_Error* e;
  if (error_new == NULL) { /* the table comes from the entry: no host can get here without it */
    fprintf(stderr, "plrt single_device strategy: launch_info called before pl_plugin_entry_v1; aborting\n");
    abort();
  }
  e = check_options(error_new, options);
  if (e != NULL) return e;
  if (out == NULL || out->struct_size < PL_STRUCT_SIZE(PL_LaunchInfo, needs_process_group)) return NULL;
  out->mode = PL_LAUNCH_SINGLE_PROCESS;
  out->needs_process_group = 0;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 1;
  return NULL;
}

static PL_Error* sd_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  char msg[256];
  struct PL_Strategy* s;
  PL_Error* e;
  if (out == NULL || config == NULL) return invalid(host, "single_device: config or out is NULL");
  *out = NULL;
  if (config->struct_size < PL_STRUCT_SIZE(PL_StrategyConfig, options))
    return host->error_new(PL_ERR_VERSION, "single_device: PL_StrategyConfig is smaller than ABI 1.0's");
  if (config->num_devices > 1) {
    snprintf(msg, sizeof msg,
             "single_device drives one device but was given %zu; use strategy 'ddp' or 'dp' for several",
             (size_t)config->num_devices);
    return invalid(host, msg);
  }
  if (config->world_size > 1) {
    snprintf(msg, sizeof msg, "single_device runs alone but the job has world_size %d; use strategy 'ddp'",
             (int)config->world_size);
    return invalid(host, msg);
  }
  e = check_options(host->error_new, &config->options);
  if (e != NULL) return e;
  s = (struct PL_Strategy*)calloc(1, sizeof *s);
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, "single_device: out of memory");
  s->host = host;
  s->acc_api = config->accelerator_api;
  s->acc = config->accelerator;
  s->device.type = config->accelerator_api ? config->accelerator_api->device_type : PL_DEVICE_CPU;
  s->device.index = config->num_devices == 1 && config->device_ids ? config->device_ids[0] : 0;
  *out = s;
  return NULL;
}

static void sd_destroy(PL_Strategy* s) {
  if (s == NULL) return;
  free(s->ranges);
  free(s);
}

static PL_Error* sd_setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  size_t i;
  if (num_params > 0 && params == NULL) return invalid(s->host, "single_device: params is NULL");
  free(s->ranges);
  s->ranges = NULL;
  s->num_ranges = 0;
  if (num_params > 0) {
    s->ranges = (PL_ParamRange*)calloc(num_params, sizeof *s->ranges);
    if (s->ranges == NULL) return s->host->error_new(PL_ERR_RESOURCE, "single_device: out of memory");
  }
  /* The ranges optimizer_step hands the host: every trainable parameter, whole.  Frozen
   * parameters (no gradient) and buffers are never stepped. */
  for (i = 0; i < num_params; ++i) {
    PL_ParamRange* r;
    if (pl_parameter_kind(&params[i]) != PL_PARAM_TRAINABLE) continue;
    r = &s->ranges[s->num_ranges++];
    r->struct_size = sizeof *r;
    r->param_index = i;
    r->begin = 0;
    r->end = params[i].value.numel;
  }
  s->params = params;
  s->num_params = num_params;
  return NULL;
}

static PL_Error* sd_run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  if (fn == NULL || fn->run == NULL) return invalid(s->host, "single_device: run_step needs a step function");
  return fn->run(fn->user, 0, 1, s->device, s->params, s->num_params);
}

static PL_Error* sd_after_backward(PL_Strategy* s) {
  (void)s; /* one replica: its gradients are already the gradients */
  return NULL;
}

static PL_Error* sd_teardown(PL_Strategy* s) {
  s->params = NULL;
  s->num_params = 0;
  s->num_ranges = 0;
  return NULL;
}

/* ---- ABI 1.4 ---- */

static PL_Error* sd_optimizer_step(PL_Strategy* s, const PL_OptimizerFn* fn) {
  if (fn == NULL || fn->step == NULL) return invalid(s->host, "single_device: optimizer_step needs a step function");
  /* Alone: this rank updates every trainable parameter, and there is nothing to share after. */
  return fn->step(fn->user, s->ranges, s->num_ranges);
}

static PL_Error* sd_agree_skip(PL_Strategy* s, int32_t found_inf, int32_t* out_skip) {
  if (out_skip == NULL) return invalid(s->host, "single_device: agree_skip needs out_skip");
  *out_skip = found_inf != 0; /* alone: its own verdict */
  return NULL;
}

static PL_Error* sd_reduce(PL_Strategy* s, PL_Tensor* tensor, PL_ReduceOp op) {
  char msg[160];
  if (tensor == NULL) return invalid(s->host, "single_device: reduce needs a tensor");
  if (op < PL_REDUCE_SUM || op > PL_REDUCE_PRODUCT) {
    snprintf(msg, sizeof msg, "single_device: reduce op %d is not valid (1 sum, 2 avg, 3 min, 4 max, 5 product)",
             (int)op);
    return invalid(s->host, msg);
  }
  return NULL; /* over one process every op is the identity */
}

static PL_Error* sd_all_gather(PL_Strategy* s, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs) {
  char msg[200];
  size_t bytes;
  if (input == NULL || outputs == NULL) return invalid(s->host, "single_device: all_gather needs an input and outputs");
  if (num_outputs != 1) {
    snprintf(msg, sizeof msg, "single_device: all_gather got %zu outputs but the world size is 1", (size_t)num_outputs);
    return invalid(s->host, msg);
  }
  if (outputs[0].dtype != input->dtype || outputs[0].numel != input->numel) {
    snprintf(msg, sizeof msg,
             "single_device: all_gather's output holds %lld elements of dtype %d, the input %lld of dtype %d",
             (long long)outputs[0].numel, (int)outputs[0].dtype, (long long)input->numel, (int)input->dtype);
    return invalid(s->host, msg);
  }
  bytes = (size_t)input->numel * pl_dtype_size(input->dtype);
  if (bytes == 0 || outputs[0].data == input->data) return NULL;
  if (input->device.type == PL_DEVICE_CPU && outputs[0].device.type == PL_DEVICE_CPU) {
    memcpy(outputs[0].data, input->data, bytes);
    return NULL;
  }
  if (s->acc_api == NULL || s->acc == NULL)
    return s->host->error_new(PL_ERR_UNSUPPORTED, "single_device: all_gather of device memory needs an accelerator");
  {
    PL_Error* e = s->acc_api->copy(s->acc, outputs[0].data, outputs[0].device, input->data, input->device, bytes, NULL);
    if (e != NULL) return e;
    return s->acc_api->stream_synchronize(s->acc, NULL); /* blocking, as the contract says */
  }
}

static PL_Error* sd_state_info(PL_Strategy* s, PL_StrategyStateInfo* out) {
  if (out == NULL || out->struct_size < PL_STRUCT_SIZE(PL_StrategyStateInfo, any_world_size))
    return invalid(s->host, "single_device: state_info needs an ABI 1.4 PL_StrategyStateInfo");
  out->has_state = 0; /* nothing of its own: the host's checkpoint is the whole state */
  out->any_world_size = 1;
  return NULL;
}

static const PL_StrategyApi kApi = {
    sizeof(PL_StrategyApi),
    sd_launch_info,
    sd_create,
    sd_destroy,
    sd_setup,
    sd_run_step,
    sd_after_backward,
    sd_teardown,
    NULL,              /* on_grad_ready: nothing to overlap */
    NULL,              /* set_grad_sync: nothing to sync */
    NULL,              /* before_optimizer_step */
    NULL,              /* after_optimizer_step */
    NULL,              /* process_group: runs alone */
    NULL,              /* get_stat: nothing to report */
    NULL,              /* num_replicas: one (ABI 1.3) */
    NULL,              /* setup_replica */
    sd_optimizer_step, /* ABI 1.4 */
    sd_agree_skip,
    sd_reduce,
    sd_all_gather,
    sd_state_info,
    NULL, /* save_state: no state (state_info says so) */
    NULL, /* load_state */
    NULL, /* owned_ranges: one rank holds everything (ABI 1.5) */
    NULL, /* bind_optimizer: any optimizer (ABI 1.6) */
    NULL  /* sync_weights: one rank, nothing to make equal (ABI 1.6) */
};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  PL_ABI_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  "single_device",
                                  "0.1.0",
                                  "One process on one device, no communication (Lightning's SingleDeviceStrategy)",
                                  NULL,
                                  0,
                                  &kApi};

/* What PL_DEFINE_PLUGIN(kPlugin) exports, with the same checks of the host, and the host's
 * error_new kept for launch_info. */
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
