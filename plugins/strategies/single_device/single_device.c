/*
 * single_device: one process, one device, no communication (Lightning's SingleDeviceStrategy).
 * Written in plain C99 against the plugin headers alone: it is also the reference for writing a
 * strategy plugin in C (see docs/architecture.md).
 */
#include <plrt/pl_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct PL_Strategy {
  const PL_Host* host; /* borrowed from create; outlives the instance */
  PL_Device device;
  PL_Parameter* params; /* borrowed from setup until teardown */
  size_t num_params;
};

static PL_Error* invalid(const PL_Host* host, const char* message) {
  return host->error_new(PL_ERR_INVALID_ARGUMENT, message);
}

static PL_Error* sd_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  (void)options;
  if (out == NULL || out->struct_size < PL_STRUCT_SIZE(PL_LaunchInfo, needs_process_group)) return NULL;
  out->mode = PL_LAUNCH_SINGLE_PROCESS;
  out->needs_process_group = 0;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 1;
  return NULL;
}

static PL_Error* sd_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  char msg[256];
  struct PL_Strategy* s;
  size_t i;
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
  for (i = 0; i < config->options.count; ++i) {
    snprintf(msg, sizeof msg, "single_device takes no options; got '%s'", config->options.items[i].key);
    return invalid(host, msg);
  }
  s = (struct PL_Strategy*)calloc(1, sizeof *s);
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, "single_device: out of memory");
  s->host = host;
  s->device.type = config->accelerator_api ? config->accelerator_api->device_type : PL_DEVICE_CPU;
  s->device.index = config->num_devices == 1 && config->device_ids ? config->device_ids[0] : 0;
  *out = s;
  return NULL;
}

static void sd_destroy(PL_Strategy* s) { free(s); }

static PL_Error* sd_setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  if (num_params > 0 && params == NULL) return invalid(s->host, "single_device: params is NULL");
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
    NULL, /* on_grad_ready: nothing to overlap */
    NULL, /* set_grad_sync: nothing to sync */
    NULL, /* before_optimizer_step */
    NULL, /* after_optimizer_step */
    NULL, /* process_group: runs alone */
    NULL, /* get_stat: nothing to report */
    NULL, /* num_replicas: one (ABI 1.3) */
    NULL, /* setup_replica */
    NULL, /* optimizer_step: the host steps every parameter (ABI 1.4) */
    NULL, /* agree_skip */
    NULL, /* reduce */
    NULL, /* all_gather */
    NULL, /* state_info */
    NULL, /* save_state */
    NULL  /* load_state */
};

static const PL_Plugin kPlugin = {
    sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, "single_device", "0.1.0",
    "One process on one device, no communication (Lightning's SingleDeviceStrategy)",
    NULL, 0, &kApi};

PL_DEFINE_PLUGIN(kPlugin)
