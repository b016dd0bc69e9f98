// pl::JobContext: the knobs, the launcher's place, the runtime, the device and the store of a
// program with its own model (job_context.hpp), over the drivers' one set-up path (job_session.hpp).
#include <cstdlib>
#include <plrt/sdk/job_context.hpp>

#include "job_context_impl.hpp"

namespace pl {

JobContext::JobContext(GradientSyncOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = std::move(options);
  JobRequest req;
  req.accelerator = m.o.accelerator;
  req.devices = m.o.devices;
  req.strategy = m.o.strategy;
  req.num_nodes = m.o.num_nodes;
  req.process_group_backend = m.o.process_group_backend;
  req.strategy_options = m.o.strategy_options;
  if (m.o.read_env) plrt::sdk::apply_knob_env(req);
  m.o.accelerator = req.accelerator, m.o.devices = req.devices, m.o.strategy = req.strategy;
  m.o.num_nodes = req.num_nodes, m.o.process_group_backend = req.process_group_backend;
  m.o.strategy_options = req.strategy_options;
  plrt::sdk::JobSession& s = m.session;
  s.env = m.o.cluster ? *m.o.cluster : ClusterEnv::detect();
  s.start_runtime(m.o.runtime);
  s.resolve(req, plrt::sdk::Driver::External);
  plrt::sdk::JobSession::OpenOptions oo;
  oo.accelerator_options = m.o.accelerator_options;
  oo.cpu_sharers = s.local_world;
  oo.timeout = m.o.timeout;
  s.open(oo);
}

JobContext::~JobContext() = default;

int JobContext::rank() const { return impl_->session.rank; }
int JobContext::world_size() const { return impl_->session.world; }
int JobContext::local_rank() const { return impl_->session.local_rank; }
int JobContext::local_world_size() const { return impl_->session.local_world; }
int JobContext::node_rank() const { return impl_->session.node_rank; }
PL_Device JobContext::device() const { return impl_->session.device; }
const JobConfig& JobContext::job() const { return impl_->session.job; }
const std::string& JobContext::launcher() const { return impl_->session.env.source; }
const GradientSyncOptions& JobContext::options() const { return impl_->o; }
const Runtime& JobContext::runtime() const { return *impl_->session.rt; }

std::shared_ptr<ProcessGroup> JobContext::process_group(const std::string& name) {
  Impl& m = *impl_;
  if (name.empty()) throw Error(PL_ERR_INVALID_ARGUMENT, "JobContext::process_group: the name is empty");
  if (m.session.world <= 1) return nullptr;
  auto it = m.groups.find(name);
  if (it != m.groups.end()) return it->second;
  ProcessGroupOptions po;
  po.rank = m.session.rank;
  po.world_size = m.session.world;
  po.group_name = name;
  po.timeout = m.o.timeout;
  po.device = m.session.device;
  auto pg = std::make_shared<ProcessGroup>(*m.session.rt, m.session.job.process_group_backend, *m.session.store, po);
  m.groups.emplace(name, pg);
  return pg;
}

std::unique_ptr<Store> JobContext::Impl::store_for(const std::string& name) const {
  if (session.world <= 1 || name.empty()) return nullptr;
  StoreOptions so;
  so.host = session.env.master_addr;
  so.port = session.env.master_port;  // where rank 0 (or the launcher's agent) serves the job's store
  so.is_server = false;
  so.token = session.env.token;
  so.timeout = o.timeout;
  const char* base = std::getenv("PL_STORE_PREFIX");
  so.key_prefix = std::string(base ? base : "") + "plrt.instance." + name + "/";
  return std::make_unique<Store>(*session.rt, so);
}

}  // namespace pl
