/*
 * embed_c: a C99 program that embeds the plrt runtime without the C++ SDK.  It creates a runtime,
 * finds the cpu accelerator and the gloo process-group plugin by name, joins the job's rendezvous
 * store, makes a process group of every rank and runs two collectives on it (an allreduce and an
 * allgather), each bounded by a timeout; it checks their results against what every rank must
 * see, prints them one line per collective, and tears everything down in the reverse order.
 *
 *   plrun --devices 3 -- ./embed_c          three ranks under plrun (it serves the store)
 *   ./embed_c                               alone: a world of one, with a store of its own
 *   RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. ./embed_c   any torchrun-style launcher
 *
 * Options: --timeout-ms N (each store wait and collective; default 60000); --plugin-path DIR (a
 * folder searched for plugins before the installed ones; it must exist).
 * Exit codes, as plrt's programs (plrt/sdk/exit_code.hpp): 0 success; 2 bad input (an option, a
 * variable, a plugin not found or built for another ABI), the error naming it; 1 any other
 * failure (a peer, the network, a wrong result).  Every PL_Error is freed.
 */
#include <plrt/runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_VALUES 4 /* elements each rank contributes to the allreduce */

/* ---- errors: print, free, and the exit code -------------------------------------------------- */

/* The exit code for an error's code: the rule of plrt's programs (pl::exit_code_for). */
static int exit_code_for(PL_ErrorCode code) {
  return code == PL_ERR_INVALID_ARGUMENT || code == PL_ERR_NOT_FOUND || code == PL_ERR_VERSION ? 2 : 1;
}

/* Prints `what: <message>` and frees the error; returns its exit code (0 for NULL). */
static int report(const char* what, PL_Error* e) {
  int code;
  if (e == NULL) return 0;
  code = exit_code_for(pl_error_code(e));
  fprintf(stderr, "embed_c: error: %s: %s\n", what, pl_error_message(e));
  pl_error_destroy(e);
  return code;
}

/* ---- the job: the torchrun-style variables plrun sets ----------------------------------------- */

typedef struct Job {
  int rank, world_size;
  const char* master_addr; /* NULL: the store's default ($MASTER_ADDR, else 127.0.0.1) */
  int port;                /* the store's port: -1 none given (a world of one serves on a free port) */
  long timeout_ms;
  int serve;              /* nonzero: this process serves the store (rank 0 unless a launcher does) */
  const char* plugin_dir; /* --plugin-path, or NULL; borrowed from argv */
} Job;

/* Reads `name` as an integer in [lo, hi] into *out (unset or empty: *out keeps its default).
 * Returns 0, or 2 after printing which value is wrong and what is valid. */
static int env_int(const char* name, long lo, long hi, int* out) {
  const char* v = getenv(name);
  char* end = NULL;
  long x;
  if (v == NULL || *v == '\0') return 0;
  x = strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    fprintf(stderr, "embed_c: error: %s='%s' is not valid: it must be an integer in [%ld, %ld]\n", name, v, lo, hi);
    return 2;
  }
  *out = (int)x;
  return 0;
}

static int is_true(const char* v) {
  return v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "True") == 0 || strcmp(v, "true") == 0);
}

static int read_job(int argc, char** argv, Job* job) {
  int i, rc = 0;
  job->rank = 0;
  job->world_size = 1;
  job->port = -1;
  job->timeout_ms = 60000;
  job->plugin_dir = NULL;
  for (i = 1; i < argc; ++i) {
    char* end = NULL;
    if (strcmp(argv[i], "--timeout-ms") == 0) {
      if (i + 1 == argc) {
        fprintf(stderr, "embed_c: error: --timeout-ms needs a value: milliseconds >= 1\n");
        return 2;
      }
      job->timeout_ms = strtol(argv[++i], &end, 10);
      if (*argv[i] == '\0' || *end != '\0' || job->timeout_ms < 1) {
        fprintf(stderr, "embed_c: error: --timeout-ms '%s' is not valid: give milliseconds >= 1\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--plugin-path") == 0) {
      if (i + 1 == argc) {
        fprintf(stderr, "embed_c: error: --plugin-path needs a value: a folder of libplrt_<kind>_<name>.so files\n");
        return 2;
      }
      job->plugin_dir = argv[++i]; /* checked by pl_runtime_create: an existing folder */
    } else {
      fprintf(stderr, "embed_c: error: '%s' is not an option; usage: embed_c [--timeout-ms N] [--plugin-path DIR]\n",
              argv[i]);
      return 2;
    }
  }
  rc = rc ? rc : env_int("WORLD_SIZE", 1, 1000000, &job->world_size);
  rc = rc ? rc : env_int("RANK", 0, job->world_size - 1, &job->rank);
  rc = rc ? rc : env_int("MASTER_PORT", 1, 65535, &job->port);
  if (rc) return rc;
  if (job->world_size > 1 && job->port < 0) {
    fprintf(stderr,
            "embed_c: error: MASTER_PORT is not set: a job of %d processes needs the rendezvous port "
            "(plrun and torchrun set it)\n",
            job->world_size);
    return 2;
  }
  job->master_addr = getenv("MASTER_ADDR");
  /* plrun serves the store itself and says so (PL_USE_AGENT_STORE=1); otherwise rank 0 serves it.
   * Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) PyTorch's TCPStore holds
   * MASTER_PORT, so plrt's goes on the next port, as the SDK's cluster environment does. */
  job->serve = job->rank == 0 && !is_true(getenv("PL_USE_AGENT_STORE"));
  if (job->serve && job->port < 0) job->port = 0; /* alone: any free port */
  if (is_true(getenv("TORCHELASTIC_USE_AGENT_STORE")) && !is_true(getenv("PL_USE_AGENT_STORE")) && job->port > 0) {
    if (job->port >= 65535) {
      fprintf(stderr, "embed_c: error: MASTER_PORT=%d: the store needs MASTER_PORT + 1 under torchrun's agent store\n",
              job->port);
      return 2;
    }
    job->port += 1;
  }
  return 0;
}

/* A job token for a store that only this process uses (a world of one, no PL_JOB_TOKEN): 32 hex
 * characters from /dev/urandom, so that the store is never unauthenticated.  "" when unreadable. */
static void local_token(char out[33]) {
  unsigned char bytes[16];
  FILE* f = fopen("/dev/urandom", "rb");
  size_t i, n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
  if (f) fclose(f);
  out[0] = '\0';
  if (n != sizeof bytes) return;
  for (i = 0; i < sizeof bytes; ++i) sprintf(out + 2 * i, "%02x", bytes[i]);
}

/* ---- the collectives -------------------------------------------------------------------------- */

static PL_Tensor cpu_tensor(void* data, PL_DType dtype, int64_t numel) {
  PL_Tensor t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dtype;
  t.device.type = PL_DEVICE_CPU;
  t.device.index = 0;
  t.numel = numel;
  t.ndim = 1;
  t.shape[0] = numel;
  return t;
}

/* Waits for `work` (at most timeout_ms) and frees the handle; returns the operation's error. */
static PL_Error* finish(const PL_ProcessGroupApi* api, PL_Work* work, long timeout_ms) {
  PL_Error* e = api->work_wait(work, timeout_ms);
  api->work_destroy(work);
  return e;
}

/* Prints "rank R/W: <text>" as one line (one write, so ranks' lines do not interleave). */
static void say(const Job* job, const char* fmt, ...) {
  char line[512];
  int n = snprintf(line, sizeof line, "embed_c rank %d/%d: ", job->rank, job->world_size);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  printf("%s\n", line);
  fflush(stdout);
}

/* allreduce(SUM) of rank r's [(r+1)*1, (r+1)*2, ...]: element i must be (i+1) * W(W+1)/2. */
static int run_allreduce(const Job* job, const PL_ProcessGroupApi* api, PL_ProcessGroup* pg) {
  float values[N_VALUES];
  char text[256];
  size_t used = 0;
  int i, bad = 0;
  const double ranks_sum = job->world_size * (job->world_size + 1) / 2.0;
  PL_Tensor t = cpu_tensor(values, PL_F32, N_VALUES);
  PL_Work* work = NULL;
  PL_Error* e;
  for (i = 0; i < N_VALUES; ++i) values[i] = (float)((job->rank + 1) * (i + 1));
  e = api->allreduce(pg, &t, PL_REDUCE_SUM, &work);
  if (e == NULL) e = finish(api, work, job->timeout_ms);
  if (e) return report("allreduce", e);
  text[0] = '\0';
  for (i = 0; i < N_VALUES; ++i) {
    int n = snprintf(text + used, sizeof text - used, "%s%g", i ? " " : "", values[i]);
    if (n > 0 && used + (size_t)n < sizeof text) used += (size_t)n;
    if (values[i] != (float)((i + 1) * ranks_sum)) bad = 1;
  }
  say(job, "allreduce sum [%s] %s", text, bad ? "WRONG" : "ok");
  if (bad) fprintf(stderr, "embed_c: error: allreduce: element i should be (i+1) * %g\n", ranks_sum);
  return bad;
}

/* allgather of rank r's [r, r*r] (int64): slot q must hold [q, q*q]. */
static int run_allgather(const Job* job, const PL_ProcessGroupApi* api, PL_ProcessGroup* pg) {
  int64_t mine[2];
  int64_t* gathered = (int64_t*)calloc((size_t)job->world_size * 2, sizeof(int64_t));
  PL_Tensor* outputs = (PL_Tensor*)calloc((size_t)job->world_size, sizeof(PL_Tensor));
  PL_Tensor input = cpu_tensor(mine, PL_I64, 2);
  PL_Work* work = NULL;
  PL_Error* e = NULL;
  char text[256];
  size_t used = 0;
  int q, rc = 0, bad = 0;
  if (gathered == NULL || outputs == NULL) {
    fprintf(stderr, "embed_c: error: allgather: out of memory\n");
    free(gathered);
    free(outputs);
    return 1;
  }
  mine[0] = job->rank;
  mine[1] = (int64_t)job->rank * job->rank;
  for (q = 0; q < job->world_size; ++q) outputs[q] = cpu_tensor(gathered + 2 * q, PL_I64, 2);
  e = api->allgather(pg, &input, outputs, (size_t)job->world_size, &work);
  if (e == NULL) e = finish(api, work, job->timeout_ms);
  if (e) {
    rc = report("allgather", e);
  } else {
    text[0] = '\0';
    for (q = 0; q < job->world_size; ++q) {
      int n = snprintf(text + used, sizeof text - used, "%s[%lld %lld]", q ? " " : "", (long long)gathered[2 * q],
                       (long long)gathered[2 * q + 1]);
      if (n > 0 && used + (size_t)n < sizeof text) used += (size_t)n;
      if (gathered[2 * q] != q || gathered[2 * q + 1] != (int64_t)q * q) bad = 1;
    }
    say(job, "allgather %s %s", text, bad ? "WRONG" : "ok");
    if (bad) fprintf(stderr, "embed_c: error: allgather: slot q should hold [q q*q]\n");
    rc = bad;
  }
  free(outputs);
  free(gathered);
  return rc;
}

/* Rank r > 0 sets "embed_c/left/<r>" once it no longer needs the store; the rank that serves it
 * waits for every such key (bounded) before it stops serving.  plrun serves the store itself
 * (job->serve is 0 everywhere), so there only the keys are set. */
static int leave(const Job* job, const PL_StoreApi* api, PL_Store* store) {
  enum {
    KEY_SIZE = 32
  };
  char key[KEY_SIZE];
  char* text;
  const char** keys;
  int q, rc;
  if (!job->serve) {
    snprintf(key, sizeof key, "embed_c/left/%d", job->rank);
    return report("leaving the store", api->set(store, key, "1", 1));
  }
  if (job->world_size == 1) return 0;
  text = (char*)malloc((size_t)job->world_size * KEY_SIZE);
  keys = (const char**)malloc((size_t)job->world_size * sizeof(char*));
  if (text == NULL || keys == NULL) {
    fprintf(stderr, "embed_c: error: out of memory\n");
    rc = 1;
  } else {
    for (q = 1; q < job->world_size; ++q) {
      snprintf(text + (size_t)q * KEY_SIZE, KEY_SIZE, "embed_c/left/%d", q);
      keys[q - 1] = text + (size_t)q * KEY_SIZE;
    }
    rc = report("waiting for the other ranks to leave",
                api->wait(store, keys, (size_t)job->world_size - 1, job->timeout_ms));
  }
  free(keys);
  free(text);
  return rc;
}

/* ---- main: make, run, tear down in reverse ------------------------------------------------------ */

int main(int argc, char** argv) {
  Job job;
  PL_Runtime* rt = NULL;
  PL_ResolvedPlugin acc_plugin, pg_plugin;
  const PL_AcceleratorApi* acc_api = NULL;
  const PL_ProcessGroupApi* pg_api = NULL;
  PL_Accelerator* acc = NULL;
  PL_Store* store = NULL;
  PL_ProcessGroup* pg = NULL;
  PL_RuntimeOptions ro;
  PL_TcpStoreOptions so;
  PL_ProcessGroupConfig pc;
  PL_OptionList no_options;
  char token[33];
  int rc = read_job(argc, argv, &job);
  if (rc) return rc;

  /* 1. The runtime: the plugin search path and the log (PL_LOG_LEVEL, else info). */
  memset(&ro, 0, sizeof ro);
  ro.struct_size = sizeof ro;
  ro.rank = -1; /* log lines carry "[rank N]" from $RANK */
  if (job.plugin_dir) {
    ro.plugin_dirs = &job.plugin_dir; /* borrowed for the call; searched before the installed plugins */
    ro.num_plugin_dirs = 1;
  }
  rc = report("pl_runtime_create", pl_runtime_create(&ro, &rt));
  if (rc) return rc;

  /* 2. The plugins, by name: found in --plugin-path, beside libplrt_runtime.so (the installed
   *    plugins), then PL_PLUGIN_PATH. */
  memset(&acc_plugin, 0, sizeof acc_plugin);
  acc_plugin.struct_size = sizeof acc_plugin;
  pg_plugin = acc_plugin;
  memset(&no_options, 0, sizeof no_options);
  no_options.struct_size = sizeof no_options;
  rc = report("finding the cpu accelerator", pl_runtime_find_plugin(rt, PL_PLUGIN_ACCELERATOR, "cpu", &acc_plugin));
  if (!rc)
    rc = report("finding the gloo process group",
                pl_runtime_find_plugin(rt, PL_PLUGIN_PROCESS_GROUP, "gloo", &pg_plugin));
  if (!rc) {
    acc_api = (const PL_AcceleratorApi*)acc_plugin.plugin->api;
    pg_api = (const PL_ProcessGroupApi*)pg_plugin.plugin->api;
    rc = report("creating the cpu accelerator", acc_api->create(pl_runtime_host(rt), &no_options, &acc));
  }

  /* 3. The store: plrun's (a client), or served here by rank 0.  Token: $PL_JOB_TOKEN. */
  if (!rc) {
    memset(&so, 0, sizeof so);
    so.struct_size = sizeof so;
    so.host = job.master_addr;
    so.port = job.port;
    so.is_server = job.serve;
    so.timeout_ms = job.timeout_ms;
    so.token = NULL;      /* $PL_JOB_TOKEN */
    so.key_prefix = NULL; /* $PL_STORE_PREFIX: plrun's keys for this round of the job */
    if (job.world_size == 1 && getenv("PL_JOB_TOKEN") == NULL) {
      local_token(token);
      if (token[0]) so.token = token;
    }
    rc = report("joining the store", pl_store_create_tcp(rt, &so, &store));
  }

  /* 4. The process group of every rank, its collectives bounded by the timeout. */
  if (!rc) {
    memset(&pc, 0, sizeof pc);
    pc.struct_size = sizeof pc;
    pc.rank = job.rank;
    pc.world_size = job.world_size;
    pc.store = store;
    pc.group_name = "embed_c";
    pc.timeout_ms = job.timeout_ms;
    pc.device.type = PL_DEVICE_CPU;
    pc.device.index = 0;
    pc.accelerator_api = acc_api;
    pc.accelerator = acc;
    pc.options = no_options;
    rc = report("creating the gloo process group", pg_api->create(pl_runtime_host(rt), &pc, &pg));
  }

  /* 5. The collectives. */
  if (!rc) rc = run_allreduce(&job, pg_api, pg);
  if (!rc) rc = run_allgather(&job, pg_api, pg);

  /* 6. Tear down in reverse: the group (it uses the store and the accelerator), the store (it logs
   *    through the runtime), the accelerator, and the runtime, which unloads the plugins.  A rank
   *    that serves the store keeps it until every other rank has left its group (a key each). */
  if (pg) pg_api->destroy(pg);
  if (store && !rc) rc = leave(&job, pl_runtime_host(rt)->store_api, store);
  pl_store_destroy(store);
  if (acc) acc_api->destroy(acc);
  pl_runtime_destroy(rt);
  if (!rc) say(&job, "done");
  return rc;
}
