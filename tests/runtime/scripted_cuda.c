/* A scripted stand-in for the cuda accelerator plugin, for testing the device probe's process
 * handling where no GPU can misbehave on cue: a device that hangs, one that crashes the process,
 * one that refuses a context.  Built as test-plugins/scripted-cuda/libplrt_accelerator_cuda.so;
 * the real plugin is what production finds.
 *
 * PLRT_SCRIPTED_CUDA="ok,hang,crash,refuse,allocfail": one device per entry (device_info hangs,
 * aborts or fails for that device; allocfail fails the 1-byte alloc).  Unset or empty: 0 devices.
 * PLRT_SCRIPTED_CUDA_LOG=<file>: each device_info call appends "<pid> <index>\n", so that a test
 * can see which process touched the devices. */
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

static int32_t device_count(void) {
  int32_t n = 0;
  size_t len = 0;
  while (script_entry(n, &len) != NULL) ++n;
  return n;
}

static PL_Error* sc_create(const PL_Host* host, const PL_OptionList* options, PL_Accelerator** out) {
  (void)options;
  *out = (PL_Accelerator*)calloc(1, sizeof **out);
  if (*out == NULL) return host->error_new(PL_ERR_RESOURCE, "scripted cuda: out of memory");
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
  const char* log = getenv("PLRT_SCRIPTED_CUDA_LOG");
  if (log != NULL) {
    FILE* f = fopen(log, "a");
    if (f != NULL) {
      fprintf(f, "%ld %d\n", (long)getpid(), (int)index);
      fclose(f);
    }
  }
  if (is(index, "hang")) sleep(120);
  if (is(index, "crash")) abort();
  if (is(index, "refuse"))
    return acc->host->error_new(PL_ERR_RUNTIME, "cuda: cudaSetDevice failed: cudaErrorDevicesUnavailable "
                                                "(CUDA-capable device(s) is/are busy or unavailable)");
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

static PL_Error* sc_alloc(PL_Accelerator* acc, PL_Device device, size_t bytes, void** out) {
  if (is(device.index, "allocfail"))
    return acc->host->error_new(PL_ERR_RESOURCE, "cuda: cudaMalloc(1 bytes) failed: cudaErrorMemoryAllocation");
  *out = malloc(bytes ? bytes : 1);
  return NULL;
}

static PL_Error* sc_free(PL_Accelerator* acc, PL_Device device, void* ptr) {
  (void)acc;
  (void)device;
  free(ptr);
  return NULL;
}

static const PL_AcceleratorApi kApi = {
    .struct_size = sizeof(PL_AcceleratorApi),
    .device_type = PL_DEVICE_CUDA,
    .create = sc_create,
    .destroy = sc_destroy,
    .availability = sc_availability,
    .device_info = sc_device_info,
    .set_device = sc_set_device,
    .alloc = sc_alloc,
    .free_memory = sc_free,
};
static const PL_Plugin kPlugin = {sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_ACCELERATOR,
                                  "cuda", "0.0.1", "scripted stand-in for the probe tests", NULL, 0, &kApi};

PL_DEFINE_PLUGIN(kPlugin)
