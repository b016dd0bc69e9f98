/*
 * For test_search_path: loads the libplrt_runtime.so named by argv[1] with dlopen (a copy in a
 * temporary tree, so that the runtime is somewhere else than the build tree), creates a runtime at
 * log level debug (its "plugin search path" lines go to stderr) and prints every plugin it finds,
 * one "<kind> <name> <file>" line each, on stdout.  argv[2..]: explicit plugin folders.
 * Links nothing from plrt.  Exit 0, or 1 with the error on stderr.
 */
#include <dlfcn.h>
#include <plrt/runtime.h>
#include <stdio.h>

typedef PL_Error* (*CreateFn)(const PL_RuntimeOptions*, PL_Runtime**);
typedef void (*DestroyFn)(PL_Runtime*);
typedef PL_Error* (*ListFn)(PL_Runtime*, PL_PluginListing**);
typedef void (*ListingDestroyFn)(PL_PluginListing*);
typedef const char* (*MessageFn)(const PL_Error*);

int main(int argc, char** argv) {
  void* lib;
  CreateFn create;
  DestroyFn destroy;
  ListFn list;
  ListingDestroyFn listing_destroy;
  MessageFn message;
  PL_RuntimeOptions o = {0};
  PL_Runtime* rt = NULL;
  PL_PluginListing* listing = NULL;
  PL_Error* err;
  size_t i;
  if (argc < 2) {
    fprintf(stderr, "usage: %s <libplrt_runtime.so> [plugin folder...]\n", argv[0]);
    return 1;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  *(void**)&create = dlsym(lib, "pl_runtime_create");
  *(void**)&destroy = dlsym(lib, "pl_runtime_destroy");
  *(void**)&list = dlsym(lib, "pl_runtime_list_plugins");
  *(void**)&listing_destroy = dlsym(lib, "pl_plugin_listing_destroy");
  *(void**)&message = dlsym(lib, "pl_error_message");
  if (!create || !destroy || !list || !listing_destroy || !message) {
    fprintf(stderr, "a runtime symbol is missing\n");
    return 1;
  }
  o.struct_size = sizeof o;
  o.plugin_dirs = (const char* const*)(argv + 2);
  o.num_plugin_dirs = (size_t)(argc - 2);
  o.log_level = "debug";
  o.rank = -1;
  err = create(&o, &rt);
  if (!err) err = list(rt, &listing);
  if (err) {
    fprintf(stderr, "error: %s\n", message(err));
    return 1;
  }
  for (i = 0; i < listing->num_entries; ++i) {
    const PL_PluginListEntry* e = &listing->entries[i];
    if (!e->alias_of) printf("%d %s %s\n", (int)e->kind, e->name, e->path);
  }
  for (i = 0; i < listing->num_problems; ++i) fprintf(stderr, "problem: %s\n", listing->problems[i]);
  listing_destroy(listing);
  destroy(rt);
  return 0;
}
