// The cpu accelerator's options: "num_threads", the size of OpenBLAS's thread pool for gemm.
#include "cpu_options.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>

#include "plugin_support.hpp"

namespace plrt::cpu {
namespace {

using plrt::plugin::fail;

// A whole number >= 1 in int range, or an error naming `what` and the text.
int parse_thread_count(const char* text, const std::string& what) {
  const std::string t = text ? text : "(NULL)";
  int v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (text == nullptr || t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size() || v < 1)
    fail(PL_ERR_INVALID_ARGUMENT, "create: " + what + " '" + t + "' is invalid; it must be an integer >= 1");
  return v;
}

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

// gemm's thread count when no num_threads option is given: the node's processes (LOCAL_WORLD_SIZE,
// set by launchers) share its hardware threads, so that ranks do not oversubscribe the host.  An
// OPENBLAS_NUM_THREADS in the environment is the user's explicit choice and stays; 0 = leave
// OpenBLAS's own default.
int default_thread_count() {
  const char* lws = std::getenv("LOCAL_WORLD_SIZE");
  if (lws == nullptr || std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return 0;
  const int procs = parse_thread_count(lws, "LOCAL_WORLD_SIZE (from the environment)");
  return std::max(1, hardware_threads() / procs);
}

// Options: num_threads (gemm's OpenBLAS threads; process-wide, so the last instance created with
// it wins).  A later duplicate overrides an earlier one, so a caller's option beats an alias preset.
int thread_option(const PL_OptionList* options) {
  int threads = 0;
  // A zero struct_size is an empty (zero-initialised) list.
  if (options == nullptr || options->struct_size == 0) return threads;
  if (options->struct_size < PL_STRUCT_SIZE(PL_OptionList, count))
    fail(PL_ERR_VERSION, "create: PL_OptionList.struct_size " + std::to_string(options->struct_size) +
                             " is smaller than the v1 size " + std::to_string(PL_STRUCT_SIZE(PL_OptionList, count)));
  if (options->count > 0 && options->items == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT,
         "create: options.count is " + std::to_string(options->count) + " but options.items is NULL");
  for (size_t i = 0; i < options->count; ++i) {
    const PL_Option& o = options->items[i];
    const std::string key = o.key ? o.key : "(NULL)";
    if (key != "num_threads")
      fail(PL_ERR_INVALID_ARGUMENT, "create: unknown option '" + key + "'; the cpu accelerator takes: num_threads");
    threads = parse_thread_count(o.value, "option num_threads");
  }
  return threads;
}

}  // namespace

int blas_threads_for(const PL_OptionList* options) {
  const int threads = thread_option(options);
  return threads > 0 ? threads : default_thread_count();
}

}  // namespace plrt::cpu
