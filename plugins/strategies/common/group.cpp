#include "group.hpp"

#include <cstring>

namespace plrt::strategy {

using plugin::fail;

namespace {

// Whether the table has entry `name` (of those a strategy may need) set.
bool has_entry(const PL_ProcessGroupApi* a, const std::string& name) {
  if (name == "allreduce") return a->allreduce != nullptr;
  if (name == "broadcast") return a->broadcast != nullptr;
  if (name == "allgather") return a->allgather != nullptr;
  if (name == "reduce_scatter") return a->reduce_scatter != nullptr;
  if (name == "barrier") return a->barrier != nullptr;
  if (name == "send") return a->send != nullptr;
  if (name == "recv") return a->recv != nullptr;
  if (name == "all_to_all") return PL_HAS_FIELD(PL_ProcessGroupApi, a, all_to_all) && a->all_to_all != nullptr;
  fail(PL_ERR_INTERNAL, "a strategy asked for the unknown process-group entry '" + name + "'");
}

}  // namespace

Group::Group(const PL_Host* host, const GroupSpec& spec) : host_(host), who_(spec.who), timeout_ms_(spec.timeout_ms) {
  const std::string& who = spec.who;
  if (spec.store == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, who + ": config->store is NULL but world_size is " + std::to_string(spec.world) +
                                      ": the ranks meet through the rendezvous store");
  backend_ = spec.backend;
  PL_ResolvedPlugin found{};
  found.struct_size = sizeof found;
  check(host, host->find_plugin(host->ctx, PL_PLUGIN_PROCESS_GROUP, backend_.c_str(), &found),
        who + ": process_group_backend '" + backend_ + "'");
  if (found.plugin == nullptr || found.plugin->kind != PL_PLUGIN_PROCESS_GROUP || found.plugin->api == nullptr)
    fail(PL_ERR_INTERNAL, who + ": the host resolved process_group_backend '" + backend_ +
                              "' to something that is not a process-group plugin");
  const auto* api = static_cast<const PL_ProcessGroupApi*>(found.plugin->api);
  bool ok = api->struct_size >= PL_PROCESS_GROUP_API_MIN_SIZE && api->create != nullptr && api->destroy != nullptr &&
            api->work_wait != nullptr && api->work_test != nullptr && api->work_destroy != nullptr &&
            api->abort != nullptr;
  for (const auto& n : spec.needs) ok = ok && has_entry(api, n);
  if (!ok) {
    std::string list = "create, destroy";
    for (const auto& n : spec.needs) list += ", " + n;
    fail(PL_ERR_UNSUPPORTED, who + ": the process-group plugin '" + backend_ + "' lacks an entry " + who + " needs (" +
                                 list + ", work_wait, work_test, work_destroy, abort)");
  }
  // The backend alias's presets first, then the user's pg.* options (a later entry wins).
  std::vector<PL_Option> items;
  if (found.presets.count > 0 && found.presets.items != nullptr)
    for (size_t i = 0; i < found.presets.count; ++i) items.push_back(found.presets.items[i]);
  for (const auto& kv : spec.options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
  PL_ProcessGroupConfig pc{};
  pc.struct_size = sizeof pc;
  pc.rank = spec.rank;
  pc.world_size = spec.world;
  pc.store = spec.store;
  pc.group_name = spec.name.c_str();
  pc.timeout_ms = spec.timeout_ms;
  pc.device = spec.device;
  pc.accelerator_api = spec.accelerator_api;
  pc.accelerator = spec.accelerator;
  pc.options = {sizeof(PL_OptionList), items.empty() ? nullptr : items.data(), items.size()};
  PL_ProcessGroup* pg = nullptr;
  check(host, api->create(host, &pc, &pg),
        who + ": creating the '" + backend_ + "' process group (rank " + std::to_string(spec.rank) + " of " +
            std::to_string(spec.world) +
            (spec.options.empty() ? std::string(")") : "; the options pg.<name> reach it as <name>)"));
  if (pg == nullptr)
    fail(PL_ERR_INTERNAL, who + ": the '" + backend_ + "' process group's create returned no group and no error");
  api_ = api;
  pg_ = pg;
  blocks_ = found.plugin->abi_major == PL_ABI_MAJOR && found.plugin->abi_minor >= 1;
}

Group& Group::operator=(Group&& o) noexcept {
  if (this != &o) {
    reset();
    host_ = o.host_;
    api_ = std::exchange(o.api_, nullptr);
    pg_ = std::exchange(o.pg_, nullptr);
    who_ = std::move(o.who_);
    backend_ = std::move(o.backend_);
    timeout_ms_ = o.timeout_ms_;
    blocks_ = o.blocks_;
  }
  return *this;
}

void Group::reset() noexcept {
  if (pg_ != nullptr) api_->destroy(pg_);
  pg_ = nullptr;
}

void Group::finish(PL_Error* e, PL_Work* w, const std::string& what) const {
  if (e == nullptr && w == nullptr) return;  // a blocking call that succeeded
  if (e != nullptr) check(host_, e, what + " failed");
  if (w == nullptr) fail(PL_ERR_INTERNAL, what + ": the process group returned no work handle");
  wait(w, timeout_ms_, what);
}

void Group::wait(PL_Work* w, int64_t wait_ms, const std::string& what) const {
  PL_Error* e = api_->work_wait(w, wait_ms);
  if (e != nullptr) {
    int32_t done = 0;
    PL_Error* te = api_->work_test(w, &done);
    if (te != nullptr) host_->error_destroy(te);
    if (!done) abort();  // work_destroy would wait again: fail it at once
  }
  api_->work_destroy(w);
  check(host_, e, what + " failed");
}

void Group::abort() const noexcept {
  if (pg_ == nullptr) return;
  PL_Error* e = api_->abort(pg_);
  if (e == nullptr) return;
  try {
    log_and_drop(host_, who_.c_str(), e, "aborting the process group");
  } catch (...) {
    host_->error_destroy(e);
  }
}

void Group::broadcast(PL_Tensor& t, int32_t root, const std::string& what) const {
  PL_Work* w = nullptr;
  PL_Error* e = api_->broadcast(pg_, &t, root, blocks_ ? nullptr : &w);
  finish(e, w, what);
}

void Group::allreduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const {
  PL_Work* w = nullptr;
  PL_Error* e = api_->allreduce(pg_, &t, op, blocks_ ? nullptr : &w);
  finish(e, w, what);
}

void Group::allgather(const PL_Tensor& in, PL_Tensor* outs, size_t n, const std::string& what) const {
  PL_Work* w = nullptr;
  PL_Error* e = api_->allgather(pg_, &in, outs, n, blocks_ ? nullptr : &w);
  finish(e, w, what);
}

}  // namespace plrt::strategy
