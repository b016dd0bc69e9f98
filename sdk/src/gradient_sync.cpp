// pl::GradientSync: the Trainer's set-up around a strategy (job, launcher, accelerator, store) and
// the step's strategy entries, for parameters the program owns (gradient_sync.hpp).
#include <algorithm>
#include <cstdlib>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/gradient_sync.hpp>
#include <plrt/sdk/store.hpp>
#include <set>
#include <thread>

#include "job_setup.hpp"
#include "metrics.hpp"
#include "strategy_handle.hpp"

namespace pl {

namespace {

void env_overrides(GradientSyncOptions& o) {
  auto str = [](const char* var, std::string& field) {
    if (const char* v = std::getenv(var); v && *v) field = v;
  };
  str("PL_TRAINER_ACCELERATOR", o.accelerator);
  if (const char* v = std::getenv("PL_TRAINER_DEVICES"); v && *v) o.devices = Devices::from_text(v);
  str("PL_TRAINER_STRATEGY", o.strategy);
  if (const char* v = std::getenv("PL_TRAINER_NUM_NODES"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1)
      throw Error(PL_ERR_INVALID_ARGUMENT,
                  std::string("PL_TRAINER_NUM_NODES='") + v + "' is not valid: it must be an integer >= 1");
    o.num_nodes = static_cast<int>(n);
  }
  str("PL_TRAINER_PROCESS_GROUP_BACKEND", o.process_group_backend);
  if (const char* v = std::getenv(kStrategyOptionsVariable); v && *v)
    for (const auto& [key, value] : decode_options(kStrategyOptionsVariable, v))
      set_option(o.strategy_options, key, value);
}

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
  GradientSyncOptions o;
  ClusterEnv env;
  std::shared_ptr<Runtime> rt;
  JobConfig job;
  int rank = 0, world = 1, local_rank = 0, local_world = 1, node_rank = 0;
  PL_Device device{PL_DEVICE_CPU, 0};
  Accelerator acc;
  std::unique_ptr<Store> store;
  std::vector<ExternalParameter> params;
  std::vector<PL_Parameter> c_params;
  bool set_up = false, bound = false;
  plrt::sdk::StrategyHandle strategy;  // last: torn down before what it borrows

  void resolve();
  void prepare();
  void check_params() const;
  [[noreturn]] void refuse(const std::string& why) const {
    throw Error(PL_ERR_INVALID_ARGUMENT, "GradientSync: strategy '" + job.strategy + "' " + why);
  }
  void need_setup(const char* what) const {
    if (!set_up)
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("GradientSync::") + what + " was called before setup");
  }
};

void GradientSync::Impl::resolve() {
  JobRequest req;
  req.accelerator = o.accelerator;
  req.devices = o.devices;
  req.strategy = o.strategy;
  req.num_nodes = o.num_nodes;
  req.process_group_backend = o.process_group_backend;
  req.strategy_options = o.strategy_options;  // launch_info checks them now, before any work
  job = rt->resolve(req);
  const std::string launched_by = env.source == "none" ? "" : " (launched by " + env.source + ")";
  switch (job.launch_mode) {
    case PL_LAUNCH_PROCESS_PER_DEVICE:
      if (env.source == "none" || env.spawn_parent) {
        if (job.world_size > 1)
          refuse("runs one process per device (" + std::to_string(job.world_size) +
                 " processes) and needs a launcher: run `plrun --strategy " + job.strategy + " --devices " +
                 std::to_string(job.processes_per_node) + " -- <program>` (or torchrun, srun, mpirun)");
        break;
      }
      if (env.world_size != job.world_size)
        throw Error(PL_ERR_INVALID_ARGUMENT,
                    "GradientSync: the launcher started WORLD_SIZE=" + std::to_string(env.world_size) + " processes" +
                        launched_by + " but the job asks for " + std::to_string(job.processes_per_node) +
                        " device(s) x " + std::to_string(job.num_nodes) + " node(s) = " +
                        std::to_string(job.world_size) + "; make --devices/--num-nodes agree with the launcher");
      rank = env.rank, world = env.world_size, local_rank = env.local_rank, local_world = env.local_world_size;
      node_rank = env.node_rank;
      break;
    case PL_LAUNCH_SPAWN:
      refuse(
          "spawns its workers from pl::Trainer::fit; with GradientSync start them with a launcher: "
          "`plrun --strategy ddp --devices N -- <program>`");
    default:  // one process per node
      if (job.devices.size() > 1)
        refuse("drives " + std::to_string(job.devices.size()) +
               " devices from one process with a copy of the module on each, which GradientSync cannot make "
               "(the model is the program's); use one process per device (strategy ddp under plrun)");
      if (job.world_size > 1) {
        if (env.world_size != job.world_size)
          refuse("runs one process per node (" + std::to_string(job.world_size) + " processes) but " +
                 (env.source == "none" ? std::string("no launcher started this one")
                                       : "the launcher started " + std::to_string(env.world_size) + launched_by));
        rank = env.rank, world = env.world_size, node_rank = env.node_rank;
      }
      break;
  }
}

void GradientSync::Impl::prepare() {
  const auto acc_opts = plrt::sdk::with_cpu_threads(o.accelerator_options, job.accelerator, local_world);
  acc = Accelerator(*rt, job.accelerator, acc_opts);
  acc.keep_alive(rt);
  if (job.device_type != PL_DEVICE_CPU) {
    const int idx = job.devices.empty() ? 0 : job.devices[static_cast<size_t>(local_rank) % job.devices.size()];
    device = {job.device_type, idx};
    acc.set_device(idx);
  }
  if (world > 1) {
    StoreOptions so;
    so.host = env.master_addr;
    so.port = env.master_port;
    so.is_server = rank == 0 && !env.agent_store;
    so.token = env.token;
    so.timeout = o.timeout;
    store = plrt::sdk::open_job_store(*rt, env, so, true);
  }
  plrt::sdk::StrategySetup s;
  s.rank = rank, s.world_size = world, s.local_rank = local_rank, s.local_world_size = local_world;
  s.node_rank = node_rank, s.num_nodes = job.num_nodes;
  s.device_ids = {device.index};
  s.process_group_backend = job.process_group_backend;
  s.store = store ? store->get() : nullptr;
  s.timeout_ms = o.timeout.count();
  s.options = o.strategy_options;
  strategy.create(*rt, job.strategy, acc, s);
}

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
      if (t.device.type != device.type || (device.type != PL_DEVICE_CPU && t.device.index != device.index))
        bad(w + "is on " + device_text(t.device) + " but this process trains on " + device_text(device) +
            " (accelerator '" + job.accelerator + "')");
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

GradientSync::GradientSync(GradientSyncOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = std::move(options);
  if (m.o.read_env) env_overrides(m.o);
  m.env = m.o.cluster ? *m.o.cluster : ClusterEnv::detect();
  RuntimeOptions r = m.o.runtime;
  if (r.rank < 0 && m.env.source != "none" && !m.env.spawn_parent) r.rank = m.env.rank;
  m.rt = std::make_shared<Runtime>(r);
  m.resolve();
  m.prepare();
}

GradientSync::~GradientSync() = default;  // the strategy handle logs a failed teardown

int GradientSync::rank() const { return impl_->rank; }
int GradientSync::world_size() const { return impl_->world; }
int GradientSync::local_rank() const { return impl_->local_rank; }
PL_Device GradientSync::device() const { return impl_->device; }
const JobConfig& GradientSync::job() const { return impl_->job; }
const std::string& GradientSync::launcher() const { return impl_->env.source; }
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
  Impl& m = *impl_;
  m.need_setup("backward");
  if (!m.bound) {  // as the Trainer does before its first step: the strategy learns the optimizer
    const OptimizerRequests asked = bind_optimizer("external");
    if (asked.lr_scale != 1.0 || asked.broadcast_optimizer_state)
      m.refuse("asks the optimizer for " +
               std::string(asked.lr_scale != 1.0 ? "its learning rate x" + plrt::sdk::num(asked.lr_scale) : "") +
               (asked.lr_scale != 1.0 && asked.broadcast_optimizer_state ? " and " : "") +
               (asked.broadcast_optimizer_state ? "rank 0's optimizer state" : "") +
               "; call GradientSync::bind_optimizer before the first step and apply what it returns");
  }
  m.strategy.run_step([&](int, int, PL_Device) { forward_backward(); });
  m.strategy.after_backward();
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
        throw Error(PL_ERR_INVALID_ARGUMENT, "strategy '" + m.job.strategy + "': optimizer_step passed " +
                                                 std::to_string(n) + " ranges but a NULL array");
      std::vector<ParamRange> ranges;
      for (size_t k = 0; k < n; ++k) {
        const std::string what = "strategy '" + m.job.strategy + "': optimizer_step range " + std::to_string(k);
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
  plrt::sdk::Collectives(m.rt->host(), m.strategy.pg_api(), m.strategy.pg(), m.world, &m.strategy)
      .allreduce(values, op);
}

double GradientSync::stat(const std::string& name) const { return impl_->strategy.stat(name); }

void GradientSync::teardown() {
  impl_->strategy.teardown();
  impl_->set_up = false;
}

}  // namespace pl
