#include "entry_support.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace plrt::strategy {

using plugin::fail;

namespace {

// One per plugin file (plrt_strategy_common is linked into each, with hidden symbols).
std::atomic<plugin::ErrorNewFn> g_error_new{nullptr};

}  // namespace

PL_Error* plugin_entry(const PL_Host* host, const PL_Plugin* descriptor, const PL_Plugin** out) noexcept {
  if (host == nullptr || out == nullptr) return nullptr;
  if (host->struct_size < PL_HOST_MIN_SIZE || host->abi_major != PL_ABI_MAJOR) {
    *out = nullptr;
    if (host->struct_size >= PL_STRUCT_SIZE(PL_Host, error_new) && host->error_new)
      return host->error_new(PL_ERR_VERSION, "the plugin needs a plrt v1 host table");
    return nullptr;
  }
  if (host->error_new != nullptr) g_error_new.store(host->error_new, std::memory_order_release);
  *out = descriptor;
  return nullptr;
}

plugin::ErrorNewFn launch_error_new(const char* family) noexcept {
  plugin::ErrorNewFn fn = g_error_new.load(std::memory_order_acquire);
  if (fn == nullptr) {
    std::fprintf(stderr, "plrt %s strategy: launch_info called before pl_plugin_entry_v1; aborting\n", family);
    std::abort();
  }
  return fn;
}

void broken_call(const char* family, const char* fn) {
  std::fprintf(stderr, "plrt %s strategy: %s called with a NULL strategy; aborting\n", family, fn);
  std::abort();
}

PL_Error* fill_launch_info(PL_LaunchMode mode, bool needs_process_group, int32_t max_devices_per_process,
                           PL_LaunchInfo* out) noexcept {
  if (out == nullptr || out->struct_size < PL_STRUCT_SIZE(PL_LaunchInfo, needs_process_group)) return nullptr;
  out->mode = mode;
  out->needs_process_group = needs_process_group ? 1 : 0;
  if (PL_HAS_FIELD(PL_LaunchInfo, out, max_devices_per_process)) out->max_devices_per_process = max_devices_per_process;
  return nullptr;
}

void check_step_fn(const std::string& who, const PL_ReplicaStepFn* fn) {
  if (fn == nullptr || fn->struct_size < PL_STRUCT_SIZE(PL_ReplicaStepFn, run) || fn->run == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": run_step needs a PL_ReplicaStepFn with `run` set (struct_size >= " +
                                      std::to_string(PL_STRUCT_SIZE(PL_ReplicaStepFn, run)) + ")");
}

void check_process_group_outs(const std::string& who, const void* out_api, const void* out_group) {
  if (out_api == nullptr || out_group == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": process_group: out_api and out_group must not be NULL");
}

void answer_stat(const std::string& who, const char* name, double* out, std::initializer_list<Stat> stats) {
  std::vector<std::pair<std::string, double>> list;
  for (const Stat& s : stats) list.emplace_back(s.name, s.value);
  answer_stat(who, name, out, list);
}

void answer_stat(const std::string& who, const char* name, double* out,
                 const std::vector<std::pair<std::string, double>>& stats) {
  if (name == nullptr || out == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": get_stat: name and out must not be NULL");
  const std::string n = name;
  std::string known;
  for (const auto& s : stats) {
    if (n == s.first) {
      *out = s.second;
      return;
    }
    known += (known.empty() ? "" : ", ") + s.first;
  }
  fail(PL_ERR_NOT_FOUND, who + ": get_stat: unknown statistic '" + n + "'; known: " + known);
}

}  // namespace plrt::strategy
