// DistributedDataParallel for a torch::nn::Module: the module's tensors handed to a plrt strategy
// (pl::GradientSync) as DLPack views, one AccumulateGrad post hook per trainable parameter that
// reports its gradient as autograd finishes it (so a bucket's allreduce starts while backward goes
// on, as PyTorch's Reducer does from the same place), and autograd's final callback, queued by the
// first hook of a backward, that ends the strategy's step before backward() returns.
//
// Gradient memory.  The strategy reduces fixed memory: one tensor per trainable parameter
// (`grad_mem`), registered once.  A hook copies the parameter's .grad() into it unless .grad() is
// that memory already; after the reduction .grad() gets the result: it becomes grad_mem
// (gradient_as_bucket_view) or has it copied in.  So zero_grad() at its default (set_to_none)
// works, and with gradient_as_bucket_view autograd accumulates straight into plrt's memory from the
// second step on (no copy at all).
//
// PyTorch DDP's rules kept here: the buffers are rank 0's before a forward that follows a
// synchronised one (require_forward_param_sync); the no_sync decision is taken at forward time; a
// parameter that got no gradient is an error without find_unused_parameters, and with it takes part
// as zeros (or its accumulated .grad()), while one that no rank used keeps its .grad() untouched.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

#include "ddp_impl.hpp"

namespace pl::torch {

using detail::TensorView;

namespace {

bool is_ddp_family(const std::string& s) { return s == "ddp" || s == "ddp_sharded"; }

// The strategy's name: plrun's --strategy (PL_TRAINER_STRATEGY) wins, then the DDP's, then init's.
std::string pick_strategy(const DdpOptions& o, const pl::JobContext& ctx) {
  if (const char* v = std::getenv("PL_TRAINER_STRATEGY"); v && *v) return ctx.options().strategy;
  return o.strategy.empty() ? ctx.options().strategy : o.strategy;
}

}  // namespace

DdpCore::DdpCore(std::shared_ptr<::torch::nn::Module> module, DdpOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = std::move(options);
  m.ctx = detail::context();
  detail::State& st = detail::state();
  {
    std::lock_guard<std::recursive_mutex> lock(st.m);
    m.instance = ++st.ddp_instances;
    st.ddps.push_back(&m);
  }
  m.who = "DistributedDataParallel" + (m.instance > 1 ? " #" + std::to_string(m.instance) : std::string());
  if (!module) m.bad("the module is null");
  m.module = std::move(module);
  m.strategy = pick_strategy(m.o, *m.ctx);
  const std::string plugin = detail::strategy_plugin(m.who, m.strategy, *m.ctx);  // dp, ddp2, ddp_spawn refused
  detail::check_options(m.who, m.o);
  detail::check_module(m.who, *m.module, detail::torch_device(m.ctx->device()));
  // Every rank the same parameters, before anything is broadcast into them (a collective).
  detail::check_same_on_every_rank(m.who, *m.module, detail::group());

  pl::GradientSync::Choice choice;
  choice.strategy = m.strategy;
  choice.process_group_backend = m.o.process_group_backend;
  m.manage_buffers = is_ddp_family(plugin);
  if (m.manage_buffers) {
    choice.strategy_options.emplace_back("bucket_cap_mb", std::to_string(m.o.bucket_cap_mb));
    choice.strategy_options.emplace_back("broadcast_buffers", "false");  // the rule is applied here
  } else if (m.o.bucket_cap_mb != DdpOptions{}.bucket_cap_mb) {
    choice.strategy_options.emplace_back("bucket_cap_mb", std::to_string(m.o.bucket_cap_mb));
  }
  for (const auto& kv : m.o.strategy_options) pl::set_option(choice.strategy_options, kv.first, kv.second);
  if (m.instance > 1) choice.instance = "ddp" + std::to_string(m.instance);
  m.sync = std::make_unique<pl::GradientSync>(m.ctx, choice);
  m.register_with_strategy();
}

DdpCore::~DdpCore() {
  if (!impl_) return;
  Impl& m = *impl_;
  for (auto& [acc, key] : m.hooks) acc->del_post_hook(key);
  detail::State& st = detail::state();
  {
    std::lock_guard<std::recursive_mutex> lock(st.m);
    if (st.no_sync_owner == impl_.get()) st.no_sync_owner = nullptr;
    st.ddps.erase(std::remove(st.ddps.begin(), st.ddps.end(), impl_.get()), st.ddps.end());
  }
  try {
    m.sync->teardown();
  } catch (const std::exception&) {  // the strategy handle logs a failed teardown
  }
}

void DdpCore::Impl::register_with_strategy() {
  std::vector<pl::ExternalParameter> entries;
  auto add_view = [this](const ::torch::Tensor& t) -> PL_Tensor {
    views.emplace_back(t);
    return views.back().get();
  };
  views.reserve(module->named_parameters().size() * 2 + module->named_buffers().size());
  for (auto& item : module->named_parameters()) {
    ::torch::Tensor& p = item.value();
    pl::ExternalParameter e;
    e.name = item.key();
    e.value = add_view(p);
    Param rec{item.key(), p, {}, entries.size(), p.data_ptr()};
    if (p.requires_grad()) {
      rec.grad_mem = ::torch::zeros_like(p, ::torch::MemoryFormat::Contiguous);
      e.grad = add_view(rec.grad_mem);
      params.push_back(rec);
    } else {
      e.kind = PL_PARAM_FROZEN;
      others.push_back(rec);
    }
    entries.push_back(e);
  }
  for (auto& item : module->named_buffers()) {
    if (!item.value().defined() || item.value().numel() == 0) continue;
    pl::ExternalParameter e;
    e.name = item.key();
    e.value = add_view(item.value());
    e.kind = PL_PARAM_BUFFER;
    others.push_back({item.key(), item.value(), {}, entries.size(), item.value().data_ptr()});
    buffers.emplace_back(item.key(), item.value());
    entries.push_back(e);
  }
  sync->setup(std::move(entries));  // rank 0's parameters and buffers on every rank from here
  const pl::OptimizerRequests asked = sync->bind_optimizer("torch::optim (the program's)");
  lr_scale = asked.lr_scale;  // horovod: the program multiplies its learning rate (DdpCore::lr_scale)
  used.assign(params.size(), 0);
  early_unused.assign(params.size(), 0);
  shards = sync->shards();
  owns_step = sync->owns_step();
  for (size_t i = 0; i < params.size(); ++i) {
    std::shared_ptr<::torch::autograd::Node> acc = ::torch::autograd::impl::grad_accumulator(params[i].value);
    if (!acc) bad("parameter '" + params[i].name + "' has no gradient accumulator (is it a leaf?)");
    const uintptr_t key = acc->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
        [this, i](const ::torch::autograd::variable_list& outputs, const ::torch::autograd::variable_list&) {
          on_grad(i);
          return outputs;
        }));
    hooks.emplace_back(std::move(acc), key);  // keeps the accumulator alive, as DDP's Reducer does
  }
}

void DdpCore::Impl::broadcast_buffers() {
  auto g = detail::group();
  if (!g || buffers.empty()) return;
  ::torch::NoGradGuard no_grad;
  // one broadcast per dtype: the buffers flattened into one tensor, then copied back
  std::map<::torch::ScalarType, std::vector<::torch::Tensor>> by_type;
  for (auto& [name, b] : buffers) by_type[b.scalar_type()].push_back(b);
  for (auto& [type, list] : by_type) {
    std::vector<::torch::Tensor> flat_parts;
    for (auto& b : list) flat_parts.push_back(b.reshape({-1}));
    ::torch::Tensor flat = ::torch::cat(flat_parts);
    TensorView v(flat);
    g->broadcast(v.get(), 0);
    if (ctx->rank() == 0) continue;
    int64_t at = 0;
    for (auto& b : list) {
      b.copy_(flat.narrow(0, at, b.numel()).view_as(b));
      at += b.numel();
    }
  }
}

void DdpCore::Impl::queue_end() {
  if (queued.exchange(true)) return;
  ::torch::autograd::Engine::get_default_engine().queue_callback([this] { end_backward(); });
}

void DdpCore::Impl::on_grad(size_t i) {
  Param& p = params[i];
  if (early_unused[i])
    bad("parameter '" + p.name +
        "' got a gradient through a path that does not pass through this DDP's "
        "forward output (a term of the loss computed from the module's parameters directly?), after "
        "find_unused_parameters had marked it unused at forward time, as PyTorch does.  Compute every use of the "
        "parameters inside forward");
  used[i] = 1;
  queue_end();
  if (step_sync) {
    const ::torch::Tensor g = p.value.grad();
    if (g.defined() && !g.is_same(p.grad_mem)) {
      if (!g.sizes().equals(p.value.sizes()))
        bad("parameter '" + p.name + "' got a gradient of shape " + detail::shape_text(g) + " for a value of shape " +
            detail::shape_text(p.value) + "; a gradient must have its parameter's shape");
      ::torch::NoGradGuard no_grad;
      p.grad_mem.copy_(g);
      if (o.gradient_as_bucket_view) p.value.mutable_grad() = p.grad_mem;
    }
  }
  sync->grad_ready(p.index);
}

// An unused parameter's part in the reduction: what earlier backwards accumulated in .grad(), or
// zeros (PyTorch's Reducer does the same for the bucket slot of a parameter marked unused).
void DdpCore::Impl::fill_unused(Param& p) {
  ::torch::NoGradGuard no_grad;
  const ::torch::Tensor g = p.value.grad();
  if (g.defined() && !g.is_same(p.grad_mem))
    p.grad_mem.copy_(g);
  else if (!g.defined())
    p.grad_mem.zero_();
}

void DdpCore::Impl::end_backward() {
  queued = false;
  ::torch::NoGradGuard no_grad;
  global_used.clear();
  if (step_sync) {
    std::vector<size_t> unused;  // not reported yet (mark_unused reported the ones it found)
    for (size_t i = 0; i < params.size(); ++i)
      if (!used[i] && !early_unused[i]) unused.push_back(i);
    if (!unused.empty() && !o.find_unused_parameters) {
      std::fill(used.begin(), used.end(), 0);
      std::string names;
      for (size_t k = 0; k < unused.size() && k < 5; ++k) names += (k ? ", '" : "'") + params[unused[k]].name + "'";
      if (unused.size() > 5) names += " and " + std::to_string(unused.size() - 5) + " more";
      bad(std::to_string(unused.size()) + " parameter(s) got no gradient in this backward (" + names +
          "): forward did not use them.  Pass DdpOptions::find_unused_parameters = true (their gradients then take "
          "part as zeros), or set requires_grad(false) on parameters that never train");
    }
    for (size_t i : unused) fill_unused(params[i]);  // find_unused_parameters
    if (o.find_unused_parameters) {
      global_used.assign(used.begin(), used.end());
      if (auto g = detail::group()) {
        PL_Tensor t = pl::tensor_view(global_used.data(), PL_I32, static_cast<int64_t>(global_used.size()));
        g->allreduce(t, PL_REDUCE_MAX);
      }
    }
  }
  std::fill(used.begin(), used.end(), 0);
  std::fill(early_unused.begin(), early_unused.end(), 0);
  any_early_unused = false;
  sync->finish_backward();  // every reported or unreported gradient in grad_mem is the ranks' mean
  if (!step_sync) return;
  stepped = false;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!global_used.empty() && !global_used[i]) continue;  // no rank used it: .grad() untouched
    Param& p = params[i];
    ::torch::Tensor g = p.value.grad();
    if (g.is_same(p.grad_mem)) continue;
    if (o.gradient_as_bucket_view || !g.defined())
      p.value.mutable_grad() = o.gradient_as_bucket_view ? p.grad_mem : p.grad_mem.clone();
    else
      g.copy_(p.grad_mem);
  }
}

void DdpCore::run_forward(const std::function<void()>& forward) {
  Impl& m = *impl_;
  detail::State& st = detail::state();
  {
    std::lock_guard<std::recursive_mutex> lock(st.m);
    if (st.no_sync_owner != nullptr && st.no_sync_owner != impl_.get())
      m.bad(
          "forward was called inside the no_sync() scope of another DistributedDataParallel; no_sync() applies to "
          "the instance it was called on, so this one would synchronise its gradients while the other does not.  "
          "Open this instance's own no_sync() (or close the other's first)");
  }
  if (!::torch::GradMode::is_enabled()) {  // evaluation: no step, no gradients, no buffer sync after it
    forward();
    m.require_forward_param_sync = false;
    return;
  }
  if (m.any_early_unused)
    m.bad(
        "the previous training forward's backward never ran: with find_unused_parameters its unused parameters "
        "were reported at forward time (as PyTorch does), so the step waits for that backward.  Backpropagate "
        "every training forward's output, or run forwards you do not backpropagate under torch::NoGradGuard");
  detail::check_step_state(m.who, m.params, m.others);
  if (m.owns_step && !m.stepped)
    m.bad("strategy '" + m.sync->job().strategy + "' " +
          (m.shards ? "shards the gradients: each rank holds the mean of its shard only"
                    : "acts around the optimizer step (bagua's algorithms: a weight exchange before or after it, "
                      "as with_bagua([optimizer], ...) hooks the optimizer)") +
          ", so the optimizer must step through the strategy.  Call ddp.step([&] { optimizer.step(); }) after each "
          "synchronised backward instead of optimizer.step()");
  m.step_sync = !m.no_sync;
  m.sync->set_grad_sync(m.step_sync);
  if (m.manage_buffers && m.o.broadcast_buffers && m.require_forward_param_sync && m.ctx->world_size() > 1)
    m.broadcast_buffers();
  m.sync->run_step(forward);
  m.require_forward_param_sync = m.step_sync;
}

void DdpCore::attach_outputs(const std::vector<::torch::Tensor>& outputs) {
  if (!::torch::GradMode::is_enabled()) return;
  Impl* m = impl_.get();
  // The backward through an output ends the step even when no parameter gets a gradient.
  bool hooked = false;
  for (const auto& t : outputs)
    if (t.defined() && t.requires_grad()) {
      t.register_hook([m](const ::torch::Tensor&) { m->queue_end(); });
      hooked = true;
    }
  if (hooked && m->o.find_unused_parameters && m->step_sync) m->mark_unused(outputs);
}

// PyTorch's prepare_for_backward under find_unused_parameters: the parameters whose AccumulateGrad
// the outputs' graph does not reach get no gradient in this backward, so they are reported now
// (zeros, or what earlier backwards accumulated) and their buckets need not wait for backward's end.
void DdpCore::Impl::mark_unused(const std::vector<::torch::Tensor>& outputs) {
  std::unordered_set<const ::torch::autograd::Node*> seen;
  std::vector<::torch::autograd::Node*> stack;
  for (const auto& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    ::torch::autograd::Node* n =
        t.grad_fn() ? t.grad_fn().get() : ::torch::autograd::impl::grad_accumulator(t).get();  // a leaf output
    if (n != nullptr && seen.insert(n).second) stack.push_back(n);
  }
  while (!stack.empty()) {
    ::torch::autograd::Node* n = stack.back();
    stack.pop_back();
    for (const auto& edge : n->next_edges())
      if (edge.function && seen.insert(edge.function.get()).second) stack.push_back(edge.function.get());
  }
  ::torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (seen.count(hooks[i].first.get())) continue;
    Param& p = params[i];
    fill_unused(p);
    early_unused[i] = 1;
    any_early_unused = true;
    sync->grad_ready(p.index);
  }
}

NoSyncGuard DdpCore::no_sync() { return NoSyncGuard(impl_.get()); }
const DdpOptions& DdpCore::options() const { return impl_->o; }
const std::string& DdpCore::strategy() const { return impl_->sync->job().strategy; }

double DdpCore::stat(const std::string& name) const { return impl_->sync->stat(name); }
void DdpCore::sync_weights() { impl_->sync->sync_weights(); }
double DdpCore::lr_scale() const { return impl_->lr_scale; }

void DdpCore::step(const std::function<void()>& step) {
  Impl& m = *impl_;
  m.sync->optimizer_step([&](const std::vector<pl::ParamRange>&) { step(); });
  m.stepped = true;
}

NoSyncGuard::NoSyncGuard(DdpCore::Impl* impl) : impl_(impl) {
  detail::State& st = detail::state();
  std::lock_guard<std::recursive_mutex> lock(st.m);
  if (impl_->no_sync)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, impl_->who + ": no_sync() is already open on this instance");
  impl_->no_sync = true;
  st.no_sync_owner = impl_;
}

NoSyncGuard::~NoSyncGuard() {
  if (impl_ == nullptr) return;
  detail::State& st = detail::state();
  std::lock_guard<std::recursive_mutex> lock(st.m);
  impl_->no_sync = false;
  if (st.no_sync_owner == impl_) st.no_sync_owner = nullptr;
}

}  // namespace pl::torch
