// pl::GradientSync: the Trainer's set-up around a strategy (job, launcher, accelerator, store) and
// the step's strategy entries, for parameters the program owns (gradient_sync.hpp).
#include <algorithm>
#include <cstdlib>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/gradient_sync.hpp>
#include <plrt/sdk/job_context.hpp>
#include <plrt/sdk/store.hpp>
#include <set>
#include <thread>

#include "job_context_impl.hpp"
#include "metrics.hpp"
#include "strategy_handle.hpp"

namespace pl {

namespace {

std::string device_text(PL_Device d) {
  return (d.type == PL_DEVICE_CPU    ? "cpu"
          : d.type == PL_DEVICE_CUDA ? "cuda"
                                     : "device type " + std::to_string(d.type)) +
         (d.type == PL_DEVICE_CPU ? "" : ":" + std::to_string(d.index));
}

std::string shape_text(const PL_Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim && i < PL_MAX_DIMS; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

}  // namespace

struct GradientSync::Impl {
  explicit Impl(std::shared_ptr<JobContext> c) : ctx(std::move(c)), session(ctx->impl().session) {}
  std::shared_ptr<JobContext> ctx;  // the environment, runtime, place, accelerator, device and store
  plrt::sdk::JobSession& session;   // ctx's
  JobConfig job_;                   // the job, resolved for this strategy
  OptionList strategy_options;
  std::unique_ptr<Store> own_store;  // a key space of this strategy's own, when it is not the first
  std::vector<ExternalParameter> params;
  std::vector<PL_Parameter> c_params;
  bool set_up = false, bound = false;
  plrt::sdk::StrategyHandle strategy;  // last: torn down before what it borrows

  const JobConfig& job() const { return job_; }
  void check_params() const;
  [[noreturn]] void refuse(const std::string& why) const {
    throw Error(PL_ERR_INVALID_ARGUMENT, "GradientSync: strategy '" + job().strategy + "' " + why);
  }
  void need_setup(const char* what) const {
    if (!set_up)
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("GradientSync::") + what + " was called before setup");
  }
};

void GradientSync::Impl::check_params() const {
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    const ExternalParameter& p = params[i];
    const std::string what = "GradientSync::setup: entry " + std::to_string(i) + " ('" + p.name + "')";
    auto bad = [&](const std::string& why) { throw Error(PL_ERR_INVALID_ARGUMENT, what + " " + why); };
    if (p.name.empty()) bad("has no name; every entry needs a unique one");
    if (!names.insert(p.name).second) bad("repeats a name; names must be unique");
    if (p.kind != PL_PARAM_TRAINABLE && p.kind != PL_PARAM_FROZEN && p.kind != PL_PARAM_BUFFER)
      bad("has kind " + std::to_string(p.kind) +
          "; valid: PL_PARAM_TRAINABLE (1), PL_PARAM_FROZEN (2), PL_PARAM_BUFFER (3)");
    auto check_tensor = [&](const PL_Tensor& t, const char* which) {
      const std::string w = std::string(which) + " ";
      if (t.struct_size < sizeof(PL_Tensor))
        bad(w + "has struct_size " + std::to_string(t.struct_size) + "; set it to sizeof(PL_Tensor)");
      if (pl_dtype_size(t.dtype) == 0) bad(w + "has dtype " + std::to_string(t.dtype) + ", which plrt does not know");
      if (t.numel < 0 || t.ndim < 0 || t.ndim > PL_MAX_DIMS)
        bad(w + "has numel " + std::to_string(t.numel) + " and ndim " + std::to_string(t.ndim) +
            "; valid: numel >= 0, ndim 0.." + std::to_string(PL_MAX_DIMS));
      if (t.ndim > 0) {
        int64_t product = 1;
        for (int d = 0; d < t.ndim; ++d) product = t.shape[d] < 0 ? -1 : product * t.shape[d];
        if (product != t.numel)
          bad(w + "has numel " + std::to_string(t.numel) + " but shape " + shape_text(t) +
              "; numel must be the product of the shape");
      }
      if (t.data == nullptr && t.numel > 0)
        bad(w + "has no memory (data NULL for " + std::to_string(t.numel) + " elements)");
      if (t.device.type != session.device.type ||
          (session.device.type != PL_DEVICE_CPU && t.device.index != session.device.index))
        bad(w + "is on " + device_text(t.device) + " but this process trains on " + device_text(session.device) +
            " (accelerator '" + job_.accelerator + "')");
    };
    check_tensor(p.value, "value");
    if (p.kind != PL_PARAM_TRAINABLE) continue;
    check_tensor(p.grad, "grad");
    if (p.grad.dtype != p.value.dtype || p.grad.numel != p.value.numel || p.grad.ndim != p.value.ndim ||
        !std::equal(p.grad.shape, p.grad.shape + p.grad.ndim, p.value.shape))
      bad("has a gradient of dtype " + std::string(pl_dtype_name(p.grad.dtype)) + " shaped " + shape_text(p.grad) +
          " (numel " + std::to_string(p.grad.numel) + ") for a value of dtype " + pl_dtype_name(p.value.dtype) +
          " shaped " + shape_text(p.value) + " (numel " + std::to_string(p.value.numel) + "); they must match");
    if (p.grad.data == p.value.data && p.value.numel > 0) bad("has its gradient in its value's memory");
  }
}

GradientSync::GradientSync(GradientSyncOptions options)
    : GradientSync(std::make_shared<JobContext>(std::move(options)), Choice{}) {}

GradientSync::GradientSync(std::shared_ptr<JobContext> context, Choice choice) {
  if (!context) throw Error(PL_ERR_INVALID_ARGUMENT, "GradientSync: the job context is null");
  impl_ = std::make_unique<Impl>(std::move(context));
  Impl& m = *impl_;
  const GradientSyncOptions& o = m.ctx->options();  // after plrun's overrides
  JobRequest req;
  req.accelerator = o.accelerator;
  req.devices = o.devices;
  req.strategy = choice.strategy.empty() ? o.strategy : choice.strategy;
  req.num_nodes = o.num_nodes;
  req.process_group_backend = o.process_group_backend;
  const char* env_backend = o.read_env ? std::getenv("PL_TRAINER_PROCESS_GROUP_BACKEND") : nullptr;
  if (!choice.process_group_backend.empty() && !(env_backend && *env_backend))
    req.process_group_backend = choice.process_group_backend;
  // the choice's options, then the job's (plrun's --strategy-option wins, key by key); the job's
  // belong to the job's strategy, so another strategy takes only its own
  req.strategy_options = choice.strategy_options;
  if (choice.strategy.empty() || choice.strategy == o.strategy)
    for (const auto& [key, value] : o.strategy_options) set_option(req.strategy_options, key, value);
  m.job_ = m.session.resolve_for_launcher(req);  // launch_info checks the options now, before any work
  if (m.job_.launch_mode != m.ctx->job().launch_mode || m.job_.world_size != m.session.world ||
      (m.job_.launch_mode == PL_LAUNCH_SINGLE_PROCESS && m.job_.devices.size() > 1))
    m.refuse("does not run as the job does (" + std::to_string(m.session.world) + " process(es) under strategy '" +
             m.ctx->job().strategy +
             "'); pick a strategy with one process per device (ddp, ddp_sharded, bagua, "
             "horovod) or launch the job for it");
  m.strategy_options = req.strategy_options;
  PL_Store* store = m.session.store ? m.session.store->get() : nullptr;
  if (!choice.instance.empty()) {
    m.own_store = m.ctx->impl().store_for(choice.instance);
    if (m.own_store) store = m.own_store->get();
  }
  plrt::sdk::StrategySetup setup = m.session.strategy_setup(m.strategy_options, o.timeout);
  setup.process_group_backend = m.job_.process_group_backend;
  setup.store = store;
  m.strategy.create(*m.session.rt, m.job_.strategy, m.session.acc, setup);
}

GradientSync::~GradientSync() = default;  // the strategy handle logs a failed teardown

int GradientSync::rank() const { return impl_->session.rank; }
int GradientSync::world_size() const { return impl_->session.world; }
int GradientSync::local_rank() const { return impl_->session.local_rank; }
int GradientSync::node_rank() const { return impl_->session.node_rank; }
PL_Device GradientSync::device() const { return impl_->session.device; }
const JobConfig& GradientSync::job() const { return impl_->job_; }
std::shared_ptr<JobContext> GradientSync::context() const { return impl_->ctx; }
const std::string& GradientSync::launcher() const { return impl_->session.env.source; }
const std::vector<ExternalParameter>& GradientSync::parameters() const { return impl_->params; }

void GradientSync::setup(std::vector<ExternalParameter> params) {
  Impl& m = *impl_;
  if (m.set_up) throw Error(PL_ERR_INVALID_ARGUMENT, "GradientSync::setup was called twice; it registers once");
  m.params = std::move(params);
  m.check_params();
  m.c_params.clear();
  for (const ExternalParameter& p : m.params) {
    PL_Parameter cp{};
    cp.struct_size = sizeof cp;
    cp.name = p.name.c_str();
    cp.value = p.value;
    cp.requires_grad = p.kind == PL_PARAM_TRAINABLE ? 1 : 0;
    cp.kind = p.kind;
    cp.grad = p.kind == PL_PARAM_TRAINABLE
                  ? p.grad
                  : PL_Tensor{sizeof(PL_Tensor), nullptr, p.value.dtype, p.value.device, 0, 0, {0}};
    m.c_params.push_back(cp);
  }
  m.strategy.setup(m.c_params);
  m.set_up = true;
  if (m.strategy.num_replicas() != 1)
    m.refuse("drives " + std::to_string(m.strategy.num_replicas()) +
             " replicas in this process, which GradientSync cannot make (the model is the program's)");
}

OptimizerRequests GradientSync::bind_optimizer(const std::string& name, const OptionList& hyperparameters,
                                               int64_t steps) {
  Impl& m = *impl_;
  m.need_setup("bind_optimizer");
  if (steps < 0)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                "GradientSync::bind_optimizer: steps " + std::to_string(steps) + " is not valid: it must be >= 0");
  const auto asked = m.strategy.bind_optimizer(name, hyperparameters, steps);
  m.bound = true;
  if (asked.first_moment_in_grads)
    m.refuse(
        "averages the optimizer's first moment, which the SDK forms for its own pl::QAdam under pl::Trainer; "
        "with the program's optimizer use a strategy that averages gradients (ddp, bagua's gradient_allreduce)");
  OptimizerRequests out;
  out.lr_scale = asked.lr_scale;
  out.lr_scale_reason = asked.lr_scale_reason;
  out.broadcast_optimizer_state = asked.broadcast_optimizer_state;
  return out;
}

void GradientSync::backward(const std::function<void()>& forward_backward) {
  impl_->need_setup("backward");
  run_step(forward_backward);
  finish_backward();
}

void GradientSync::run_step(const std::function<void()>& fn) {
  Impl& m = *impl_;
  m.need_setup("run_step");
  if (!m.bound) {  // as the Trainer does before its first step: the strategy learns the optimizer
    const OptimizerRequests asked = bind_optimizer("external");
    if (asked.lr_scale != 1.0 || asked.broadcast_optimizer_state)
      m.refuse("asks the optimizer for " +
               std::string(asked.lr_scale != 1.0 ? "its learning rate x" + plrt::sdk::num(asked.lr_scale) : "") +
               (asked.lr_scale != 1.0 && asked.broadcast_optimizer_state ? " and " : "") +
               (asked.broadcast_optimizer_state ? "rank 0's optimizer state" : "") +
               "; call GradientSync::bind_optimizer before the first step and apply what it returns");
  }
  m.strategy.run_step([&](int, int, PL_Device) { fn(); });
}

void GradientSync::finish_backward() {
  impl_->need_setup("finish_backward");
  impl_->strategy.after_backward();
}

void GradientSync::grad_ready(size_t index) {
  Impl& m = *impl_;
  m.need_setup("grad_ready");
  if (index >= m.params.size())
    throw Error(PL_ERR_INVALID_ARGUMENT, "GradientSync::grad_ready: index " + std::to_string(index) +
                                             " is not an entry of setup's " + std::to_string(m.params.size()) +
                                             " (valid: 0 to " + std::to_string(m.params.size()) + " - 1)");
  if (m.params[index].kind != PL_PARAM_TRAINABLE)
    throw Error(PL_ERR_INVALID_ARGUMENT, "GradientSync::grad_ready: entry " + std::to_string(index) + " ('" +
                                             m.params[index].name + "') is not trainable and has no gradient");
  m.strategy.on_grad_ready(index);
}

void GradientSync::set_grad_sync(bool on) {
  impl_->need_setup("set_grad_sync");
  impl_->strategy.set_grad_sync(on);
}

void GradientSync::optimizer_step(const StepFn& step) {
  Impl& m = *impl_;
  m.need_setup("optimizer_step");
  m.strategy.before_optimizer_step();
  if (m.strategy.has_optimizer_step()) {
    m.strategy.optimizer_step([&](const PL_ParamRange* r, size_t n) {
      if (n > 0 && r == nullptr)
        throw Error(PL_ERR_INVALID_ARGUMENT, "strategy '" + m.job().strategy + "': optimizer_step passed " +
                                                 std::to_string(n) + " ranges but a NULL array");
      std::vector<ParamRange> ranges;
      for (size_t k = 0; k < n; ++k) {
        const std::string what = "strategy '" + m.job().strategy + "': optimizer_step range " + std::to_string(k);
        if (!PL_HAS_FIELD(PL_ParamRange, &r[k], end))
          throw Error(PL_ERR_VERSION,
                      what + " has struct_size " + std::to_string(r[k].struct_size) + ", smaller than ABI 1.4's");
        if (r[k].param_index >= m.params.size() || m.params[r[k].param_index].kind != PL_PARAM_TRAINABLE ||
            r[k].begin < 0 || r[k].begin > r[k].end || r[k].end > m.params[r[k].param_index].value.numel)
          throw Error(PL_ERR_INVALID_ARGUMENT, what + " (entry " + std::to_string(r[k].param_index) + ", [" +
                                                   std::to_string(r[k].begin) + ", " + std::to_string(r[k].end) +
                                                   ")) is not inside a trainable entry of setup's array");
        ranges.push_back({r[k].param_index, r[k].begin, r[k].end});
      }
      step(ranges);
    });
  } else {
    std::vector<ParamRange> all;
    for (size_t i = 0; i < m.params.size(); ++i)
      if (m.params[i].kind == PL_PARAM_TRAINABLE) all.push_back({i, 0, m.params[i].value.numel});
    step(all);
  }
  m.strategy.after_optimizer_step();
}

void GradientSync::sync_weights() {
  impl_->need_setup("sync_weights");
  impl_->strategy.sync_weights();
}

void GradientSync::all_reduce(std::vector<double>& values, PL_ReduceOp op) {
  Impl& m = *impl_;
  m.need_setup("all_reduce");
  plrt::sdk::Collectives(m.session.rt->host(), m.strategy.pg_api(), m.strategy.pg(), m.session.world, &m.strategy)
      .allreduce(values, op);
}

std::vector<ParamRange> GradientSync::owned_ranges() const {
  const Impl& m = *impl_;
  m.need_setup("owned_ranges");
  std::vector<ParamRange> out;
  if (m.strategy.has_owned_ranges()) {
    for (const PL_ParamRange& r : m.strategy.owned_ranges(m.c_params)) out.push_back({r.param_index, r.begin, r.end});
  } else {
    for (size_t i = 0; i < m.params.size(); ++i)
      if (m.params[i].kind == PL_PARAM_TRAINABLE) out.push_back({i, 0, m.params[i].value.numel});
  }
  return out;
}

bool GradientSync::shards() const {
  impl_->need_setup("shards");
  return impl_->strategy.has_owned_ranges();
}

bool GradientSync::owns_step() const {
  impl_->need_setup("owns_step");
  return impl_->strategy.has_owned_ranges() || impl_->strategy.has_step_hooks();
}

double GradientSync::stat(const std::string& name) const { return impl_->strategy.stat(name); }

void GradientSync::teardown() {
  impl_->strategy.teardown();
  impl_->set_up = false;
}

}  // namespace pl
