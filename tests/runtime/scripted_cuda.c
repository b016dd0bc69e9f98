/* A scripted accelerator for the runtime's usable-device check (find_usable.cpp): it reports the
 * device statuses a test asks for through device_status (ABI 1.4), so that Lightning's num_devices
 * rules, the options the runtime passes and its handling of odd answers are tested without a GPU
 * (the cuda plugin's own judgement and its probe child: test_cuda_usable_rules.cpp,
 * test_cuda_probe.cpp).  Built twice, into test-plugins/scripted-cuda:
 *   libplrt_accelerator_cuda.so   "cuda", with device_status
 *   libplrt_accelerator_plain.so  "plain" (SCRIPTED_PLAIN): the same devices, and a device_status
 *                                 pointer that lies past its table's struct_size, so a runtime that
 *                                 reads it anyway is caught (every device must come out usable)
 *
 * PLRT_SCRIPTED_CUDA="ok,busy,ok,quiet": one device per entry; "busy" is occupied with the reason
 * "scripted busy" followed by the options it was given (" [max_utilization=90]"), "quiet" is
 * occupied with no reason.  Whole-answer cues, as the first entry: "fail" (device_status fails),
 * "misorder" (device 1 is listed first), "many:N" (N free devices), "grow" (always one more device
 * than the capacity).  Unset or empty: 0 devices.
 * PLRT_SCRIPTED_CUDA_LOG=<file>: each device_status call appends "<pid> <capacity>\n". */
#include <plrt/pl_plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct PL_Accelerator {
  const PL_Host* host;
};

static const char* script_entry(int32_t index, size_t* len) {
  const char* s = getenv("PLRT_SCRIPTED_CUDA");
  int32_t i = 0;
  if (s == NULL || *s == '\0') return NULL;
  for (;;) {
    const char* comma = strchr(s, ',');
    size_t n = comma ? (size_t)(comma - s) : strlen(s);
    if (i == index) {
      *len = n;
      return s;
    }
    if (comma == NULL) return NULL;
    s = comma + 1;
    ++i;
  }
}

static int is(int32_t index, const char* word) {
  size_t n = 0;
  const char* e = script_entry(index, &n);
  return e != NULL && n == strlen(word) && strncmp(e, word, n) == 0;
}

static int32_t many(void) {
  const char* s = getenv("PLRT_SCRIPTED_CUDA");
  return s != NULL && strncmp(s, "many:", 5) == 0 ? atoi(s + 5) : -1;
}

static int32_t device_count(void) {
  int32_t n = 0;
  size_t len = 0;
  if (many() >= 0) return many();
  while (script_entry(n, &len) != NULL) ++n;
  return n;
}

static PL_Error* sc_create(const PL_Host* host, const PL_OptionList* options, PL_Accelerator** out) {
  (void)options;
  *out = (PL_Accelerator*)calloc(1, sizeof **out);
  if (*out == NULL) return host->error_new(PL_ERR_RESOURCE, "scripted: out of memory");
  (*out)->host = host;
  return NULL;
}

static void sc_destroy(PL_Accelerator* acc) { free(acc); }

static PL_Error* sc_availability(PL_Accelerator* acc, PL_DeviceAvailability* out) {
  (void)acc;
  out->device_count = device_count();
  snprintf(out->reason, sizeof out->reason, "%s", out->device_count ? "" : "scripted: no device");
  return NULL;
}

static PL_Error* sc_device_info(PL_Accelerator* acc, int32_t index, PL_DeviceInfo* out) {
  (void)acc;
  snprintf(out->name, sizeof out->name, "Scripted GPU %d", (int)index);
  out->total_memory = (uint64_t)80 << 30;
  out->free_memory = out->total_memory;
  return NULL;
}

static PL_Error* sc_set_device(PL_Accelerator* acc, int32_t index) {
  (void)acc;
  (void)index;
  return NULL;
}

static PL_Error* sc_device_status(PL_Accelerator* acc, const PL_OptionList* options, PL_DeviceStatus* out,
                                  size_t capacity, size_t* out_count) {
  const char* log = getenv("PLRT_SCRIPTED_CUDA_LOG");
  char given[200] = "";
  size_t i;
  int32_t count = device_count();
  if (log != NULL) {
    FILE* f = fopen(log, "a");
    if (f != NULL) {
      fprintf(f, "%ld %lu\n", (long)getpid(), (unsigned long)capacity);
      fclose(f);
    }
  }
  if (is(0, "fail")) return acc->host->error_new(PL_ERR_RUNTIME, "scripted: device_status failed on cue");
  if (is(0, "grow")) count = (int32_t)capacity + 1;
  for (i = 0; options != NULL && i < options->count; ++i) {
    size_t used = strlen(given);
    snprintf(given + used, sizeof given - used, " [%s=%s]", options->items[i].key, options->items[i].value);
  }
  *out_count = (size_t)count;
  for (i = 0; i < capacity && i < (size_t)count; ++i) {
    PL_DeviceStatus* s = &out[i];
    s->index = (int32_t)i;
    if (is(0, "misorder") && i < 2) s->index = (int32_t)(1 - i);
    s->usable = !is((int32_t)i, "busy") && !is((int32_t)i, "quiet");
    snprintf(s->name, sizeof s->name, "Scripted GPU %d", (int)i);
    s->reason[0] = '\0';
    if (is((int32_t)i, "busy")) snprintf(s->reason, sizeof s->reason, "scripted busy%s", given);
  }
  return NULL;
}

#ifdef SCRIPTED_PLAIN
#define SCRIPTED_NAME "plain"
/* Ends before device_status: an accelerator of ABI 1.3's table size. */
#define SCRIPTED_TABLE_SIZE PL_STRUCT_SIZE(PL_AcceleratorApi, unpack)
#else
#define SCRIPTED_NAME "cuda"
#define SCRIPTED_TABLE_SIZE sizeof(PL_AcceleratorApi)
#endif

static const PL_AcceleratorApi kApi = {
    .struct_size = SCRIPTED_TABLE_SIZE,
    .device_type = PL_DEVICE_CUDA,
    .create = sc_create,
    .destroy = sc_destroy,
    .availability = sc_availability,
    .device_info = sc_device_info,
    .set_device = sc_set_device,
    .device_status = sc_device_status,
};
static const PL_Plugin kPlugin = {sizeof(PL_Plugin),
                                  PL_ABI_MAJOR,
                                  PL_ABI_MINOR,
                                  PL_PLUGIN_ACCELERATOR,
                                  SCRIPTED_NAME,
                                  "0.0.1",
                                  "scripted device statuses for the usable-device tests",
                                  NULL,
                                  0,
                                  &kApi};

PL_DEFINE_PLUGIN(kPlugin)
