// DistributedDataParallel's checks (ddp_checks.hpp).
#include "ddp_checks.hpp"

#include <cmath>

#include "state.hpp"

namespace pl::torch::detail {

namespace {

[[noreturn]] void bad(const std::string& who, const std::string& why) {
  throw pl::Error(PL_ERR_INVALID_ARGUMENT, who + ": " + why);
}

std::string kind_of(const ::torch::Tensor& t, bool buffer) {
  return buffer ? "buffer" : t.requires_grad() ? "trainable parameter" : "frozen parameter";
}

std::string describe(const std::string& name, const ::torch::Tensor& t, bool buffer) {
  return "'" + name + "' (" + kind_of(t, buffer) + ", " + std::string(c10::toString(t.scalar_type())) + " " +
         shape_text(t) + ")";
}

std::vector<std::string> signature(::torch::nn::Module& module) {
  std::vector<std::string> out;
  for (auto& item : module.named_parameters()) out.push_back(describe(item.key(), item.value(), false));
  for (auto& item : module.named_buffers())
    if (item.value().defined() && item.value().numel() > 0) out.push_back(describe(item.key(), item.value(), true));
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + '\n';
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(s.substr(at, nl - at));
  return out;
}

}  // namespace

std::string strategy_plugin(const std::string& who, const std::string& strategy, const pl::JobContext& ctx) {
  const std::string valid = "valid: ddp, ddp_sharded, bagua (and its algorithms: bagua_bytegrad, ...), horovod";
  if (strategy == "dp" || strategy == "ddp2" || strategy == "ddp_spawn")
    bad(who, "strategy '" + strategy + "' " +
                 (strategy == "ddp_spawn" ? "spawns its workers from pl::Trainer::fit"
                                          : "drives a copy of the module per device from one process") +
                 ", which a libtorch program's own model cannot do; " + valid);
  pl::JobRequest req;
  req.accelerator = ctx.job().accelerator;
  req.devices = ctx.options().devices;
  req.strategy = strategy;
  req.num_nodes = ctx.job().num_nodes;
  req.process_group_backend = ctx.options().process_group_backend;
  const pl::JobConfig j = ctx.runtime().resolve(req);  // an unknown name: the runtime's list of valid ones
  if (j.strategy_plugin == "dp" || j.strategy_plugin == "ddp2" || j.strategy_plugin == "ddp_spawn" ||
      j.launch_mode == PL_LAUNCH_SPAWN)
    bad(who, "strategy '" + strategy + "' (plugin '" + j.strategy_plugin +
                 "') cannot drive a libtorch program's own model; " + valid);
  return j.strategy_plugin;
}

void check_options(const std::string& who, const DdpOptions& o) {
  if (!std::isfinite(o.bucket_cap_mb) || o.bucket_cap_mb <= 0)
    bad(who, "bucket_cap_mb=" + std::to_string(o.bucket_cap_mb) + " is not valid: it must be a number of MiB > 0");
}

void check_module(const std::string& who, ::torch::nn::Module& module, const ::torch::Device& device) {
  size_t trainable = 0;
  auto check = [&](const std::string& name, const ::torch::Tensor& t, bool buffer) {
    const std::string what = (buffer ? "buffer '" : "parameter '") + name + "'";
    if (t.device() != device)
      bad(who, what + " is on " + t.device().str() + " but this process trains on " + device.str() +
                   " (the job's device); call module->to(job.device) before wrapping it");
    if (!t.is_contiguous())
      bad(who, what + " (shape " + shape_text(t) +
                   ") is not contiguous; plrt reduces it in place and needs "
                   "compact memory: replace it with its .contiguous() copy before wrapping the module");
    if (t.is_sparse()) bad(who, what + " is sparse; only dense tensors are supported");
  };
  for (auto& item : module.named_parameters()) {
    check(item.key(), item.value(), false);
    if (item.value().requires_grad()) ++trainable;
  }
  for (auto& item : module.named_buffers())
    if (item.value().defined() && item.value().numel() > 0) check(item.key(), item.value(), true);
  if (trainable == 0) bad(who, "the module has no parameter that requires a gradient: there is nothing to synchronise");
}

void check_same_on_every_rank(const std::string& who, ::torch::nn::Module& module,
                              const std::shared_ptr<pl::ProcessGroup>& group) {
  if (!group) return;
  const int rank = group->rank(), world = group->world_size();
  const std::vector<std::string> mine = signature(module);
  const std::vector<std::string> theirs = split(broadcast_text(rank == 0 ? join(mine) : std::string(), 0));
  std::string difference;
  for (size_t i = 0; i < std::max(mine.size(), theirs.size()) && difference.empty(); ++i) {
    if (i >= mine.size())
      difference = "rank 0 has " + std::to_string(theirs.size()) + " parameters and buffers, this rank " +
                   std::to_string(mine.size()) + ": this rank lacks " + theirs[i];
    else if (i >= theirs.size())
      difference = "rank 0 has " + std::to_string(theirs.size()) + " parameters and buffers, this rank " +
                   std::to_string(mine.size()) + ": this rank has an extra " + mine[i];
    else if (mine[i] != theirs[i])
      difference = "entry " + std::to_string(i) + " is " + mine[i] + " here but " + theirs[i] + " on rank 0";
  }
  std::vector<int32_t> differs(static_cast<size_t>(world), 0);
  differs[static_cast<size_t>(rank)] = difference.empty() ? 0 : 1;
  PL_Tensor flags = pl::tensor_view(differs);
  group->allreduce(flags, PL_REDUCE_SUM);
  std::string ranks;
  for (int r = 0; r < world; ++r)
    if (differs[static_cast<size_t>(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!difference.empty())
    bad(who, "rank " + std::to_string(rank) + " registered other parameters than rank 0: " + difference +
                 ".  Every rank must build the same model");
  if (!ranks.empty())
    bad(who, "rank(s) " + ranks +
                 " registered other parameters than rank 0 (their messages name the first "
                 "difference).  Every rank must build the same model");
}

void check_step_state(const std::string& who, const std::vector<TrackedTensor>& params,
                      const std::vector<TrackedTensor>& others) {
  auto memory = [&](const TrackedTensor& t, const char* what) {
    if (t.value.data_ptr() != t.data || !t.value.is_contiguous())
      bad(who, std::string(what) + " '" + t.name + "' now has other memory (" +
                   (t.value.is_contiguous() ? "reassigned" : "not contiguous") +
                   ") than when it was wrapped; plrt reduces and broadcasts the memory it registered.  Update "
                   "parameters in place (an optimizer does), or wrap the module again");
  };
  for (const auto& p : params) {
    memory(p, "parameter");
    const ::torch::Tensor g = p.value.grad();
    if (g.defined() && (!g.sizes().equals(p.value.sizes()) || g.scalar_type() != p.value.scalar_type() ||
                        g.device() != p.value.device()))
      bad(who, "parameter '" + p.name + "' has a gradient of " + std::string(c10::toString(g.scalar_type())) + " " +
                   shape_text(g) + " on " + g.device().str() + " for a value of " +
                   std::string(c10::toString(p.value.scalar_type())) + " " + shape_text(p.value) + " on " +
                   p.value.device().str() + "; a gradient must match its parameter (set it to none or zero it)");
  }
  for (const auto& o : others) memory(o, o.value.requires_grad() ? "parameter" : "tensor");
}

}  // namespace pl::torch::detail
