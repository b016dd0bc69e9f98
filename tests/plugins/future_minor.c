/*
 * A strategy plugin built as if against the headers of a future minor ABI (PL_ABI_MINOR + 2):
 * its descriptor declares that minor, its table is this header's PL_StrategyApi with two more
 * entries appended, and pl_plugin_abi_version says so.  It uses nothing newer than this host has,
 * so the runtime loads it, with a warning (pl_abi.h, rule 8).  Its entry refuses a host whose
 * table lacks store_api, as a plugin of a newer minor refuses a host that lacks what it needs.
 */
#include <plrt/pl_plugin.h>
#include <stddef.h>

#define FUTURE_MINOR (PL_ABI_MINOR + 2)

static PL_Error* f_launch_info(const PL_OptionList* o, PL_LaunchInfo* out) {
  (void)o;
  out->mode = PL_LAUNCH_SINGLE_PROCESS;
  return NULL;
}
static PL_Error* f_create(const PL_Host* h, const PL_StrategyConfig* c, PL_Strategy** out) {
  (void)h;
  (void)c;
  *out = NULL;
  return NULL;
}
static void f_destroy(PL_Strategy* s) { (void)s; }
static PL_Error* f_setup(PL_Strategy* s, PL_Parameter* p, size_t n) {
  (void)s;
  (void)p;
  (void)n;
  return NULL;
}
static PL_Error* f_run_step(PL_Strategy* s, const PL_ReplicaStepFn* f) {
  (void)s;
  (void)f;
  return NULL;
}
static PL_Error* f_simple(PL_Strategy* s) {
  (void)s;
  return NULL;
}

/* The future table: today's, then entries this host does not know. */
typedef struct FutureStrategyApi {
  PL_StrategyApi today;
  PL_Error* (*future_entry_a)(PL_Strategy* s);
  PL_Error* (*future_entry_b)(PL_Strategy* s);
} FutureStrategyApi;

static const FutureStrategyApi kApi = {{.struct_size = sizeof(FutureStrategyApi),
                                        .launch_info = f_launch_info,
                                        .create = f_create,
                                        .destroy = f_destroy,
                                        .setup = f_setup,
                                        .run_step = f_run_step,
                                        .after_backward = f_simple,
                                        .teardown = f_simple},
                                       f_simple,
                                       f_simple};

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  FUTURE_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  "future_minor",
                                  "9.9.9",
                                  "built for a future minor ABI",
                                  NULL,
                                  0,
                                  &kApi};

PL_EXPORT uint32_t pl_plugin_abi_version(void) { return ((uint32_t)PL_ABI_MAJOR << 16) | (uint32_t)FUTURE_MINOR; }

PL_EXPORT PL_Error* pl_plugin_entry_v1(const PL_Host* host, const PL_Plugin** out) {
  *out = NULL;
  if (host->abi_major != PL_ABI_MAJOR || !PL_HAS_FIELD(PL_Host, host, store_api))
    return host->error_new(PL_ERR_VERSION, "future_minor needs a v1 host with store_api");
  *out = &kPlugin;
  return NULL;
}
