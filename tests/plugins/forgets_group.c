/*
 * "forgets_group": the mistake the trainer warns about, built by the tests (tests/samples).  Its
 * launch_info asks for a process group (needs_process_group 1) yet its table has no process_group
 * entry, nor reduce, all_gather or agree_skip: the trainer's metrics and the checkpoint's RNG
 * gather would silently stay on each rank.  Otherwise it trains every rank alone (no exchange), so
 * a run under plrun completes and its output can be checked for the warning.
 */
#include <plrt/pl_plugin.h>
#include <stdlib.h>

struct PL_Strategy {
  const PL_Host* host; /* borrowed from create */
  PL_Device device;
  PL_Parameter* params; /* borrowed from setup until teardown */
  size_t num_params;
};

static PL_Error* fg_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  (void)options;
  out->mode = PL_LAUNCH_PROCESS_PER_DEVICE;
  out->needs_process_group = 1; /* ... and then never answers one */
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = 1;
  return NULL;
}

static PL_Error* fg_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  struct PL_Strategy* s = (struct PL_Strategy*)calloc(1, sizeof *s);
  if (s == NULL) return host->error_new(PL_ERR_RESOURCE, "forgets_group: out of memory");
  s->host = host;
  s->device.type = config->accelerator_api != NULL ? config->accelerator_api->device_type : PL_DEVICE_CPU;
  s->device.index = config->num_devices == 1 && config->device_ids != NULL ? config->device_ids[0] : 0;
  *out = s;
  return NULL;
}

static void fg_destroy(PL_Strategy* s) { free(s); }

static PL_Error* fg_setup(PL_Strategy* s, PL_Parameter* params, size_t num_params) {
  s->params = params;
  s->num_params = num_params;
  return NULL;
}

static PL_Error* fg_run_step(PL_Strategy* s, const PL_ReplicaStepFn* fn) {
  return fn->run(fn->user, 0, 1, s->device, s->params, s->num_params);
}

static PL_Error* fg_after_backward(PL_Strategy* s) {
  (void)s;
  return NULL;
}

static PL_Error* fg_teardown(PL_Strategy* s) {
  s->params = NULL;
  s->num_params = 0;
  return NULL;
}

/* The REQUIRED entries only: process_group and every later entry are NULL. */
static const PL_StrategyApi kApi = {sizeof(PL_StrategyApi),
                                    fg_launch_info,
                                    fg_create,
                                    fg_destroy,
                                    fg_setup,
                                    fg_run_step,
                                    fg_after_backward,
                                    fg_teardown,
                                    NULL, /* on_grad_ready */
                                    NULL, /* set_grad_sync */
                                    NULL, /* before_optimizer_step */
                                    NULL, /* after_optimizer_step */
                                    NULL, /* process_group: the mistake */
                                    NULL, /* get_stat */
                                    NULL, /* num_replicas */
                                    NULL, /* setup_replica */
                                    NULL, /* optimizer_step */
                                    NULL, /* agree_skip */
                                    NULL, /* reduce */
                                    NULL, /* all_gather */
                                    NULL, /* state_info */
                                    NULL, /* save_state */
                                    NULL, /* load_state */
                                    NULL, /* owned_ranges */
                                    NULL, /* bind_optimizer */
                                    NULL /* sync_weights */};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  PL_ABI_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  "forgets_group",
                                  "0.1.0",
                                  "Test strategy: asks for a process group and answers none",
                                  NULL,
                                  0,
                                  &kApi};

PL_DEFINE_PLUGIN(kPlugin)
