/*
 * Deliberately broken strategy plugins, one per BROKEN_* macro, to test that the loader names the
 * file and the reason for each.  Built several times by tests/plugins/CMakeLists.txt.
 */
#include <plrt/pl_plugin.h>
#include <stddef.h>

static PL_Error* b_launch_info(const PL_OptionList* o, PL_LaunchInfo* out) {
  (void)o;
  out->mode = PL_LAUNCH_SINGLE_PROCESS;
  return NULL;
}
static PL_Error* b_create(const PL_Host* h, const PL_StrategyConfig* c, PL_Strategy** out) {
  (void)h;
  (void)c;
  *out = NULL;
  return NULL;
}
static void b_destroy(PL_Strategy* s) { (void)s; }
static PL_Error* b_setup(PL_Strategy* s, PL_Parameter* p, size_t n) {
  (void)s;
  (void)p;
  (void)n;
  return NULL;
}
static PL_Error* b_run_step(PL_Strategy* s, const PL_ReplicaStepFn* f) {
  (void)s;
  (void)f;
  return NULL;
}
static PL_Error* b_simple(PL_Strategy* s) {
  (void)s;
  return NULL;
}

static const PL_StrategyApi kApi = {
#if defined(BROKEN_SMALL_TABLE)
    16, /* claims a table smaller than ABI 1.0 requires */
#else
    sizeof(PL_StrategyApi),
#endif
    b_launch_info,
#if defined(BROKEN_NULL_REQUIRED)
    NULL, /* create is REQUIRED */
#else
    b_create,
#endif
    b_destroy,
    b_setup,
    b_run_step,
    b_simple,
    b_simple,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL /* owned_ranges (1.5) */,
    NULL /* bind_optimizer (1.6) */,
    NULL /* sync_weights (1.6) */};

#if defined(BROKEN_WRONG_NAME)
#define PLUGIN_NAME "othername"
#else
#define PLUGIN_NAME BROKEN_FILE_NAME
#endif

static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  PL_ABI_MINOR,
                                  PL_PLUGIN_STRATEGY,
                                  PLUGIN_NAME,
                                  "0.0.1",
                                  "broken on purpose",
                                  NULL,
                                  0,
                                  &kApi};

#if defined(BROKEN_NO_ENTRY)
/* Exports something, but not the entry symbol. */
PL_EXPORT int not_a_plugin_entry(void) { return 42; }
#elif defined(BROKEN_NEWER_MAJOR)
/* What a plugin built for a future ABI 2 would export. */
PL_EXPORT uint32_t pl_plugin_abi_version(void) { return (2u << 16) | 3u; }
PL_EXPORT PL_Error* pl_plugin_entry_v2(const PL_Host* host, const PL_Plugin** out) {
  (void)host;
  *out = &kPlugin;
  return NULL;
}
#elif defined(BROKEN_REFUSES_HOST)
PL_EXPORT uint32_t pl_plugin_abi_version(void) { return (1u << 16); }
PL_EXPORT PL_Error* pl_plugin_entry_v1(const PL_Host* host, const PL_Plugin** out) {
  *out = NULL;
  return host->error_new(PL_ERR_VERSION, "this plugin needs a host with feature X");
}
#else
PL_DEFINE_PLUGIN(kPlugin)
#endif
