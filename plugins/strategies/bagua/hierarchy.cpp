#include "hierarchy.hpp"

#include "plugin_support.hpp"

namespace plrt::bagua {

using plugin::fail;

namespace {

// A float32 scratch tensor of n elements at `mem` on dev's device.
PL_Tensor f32_view(const strategy::DeviceContext& dev, const strategy::DeviceMemory& mem, int64_t n) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = mem.get();
  t.dtype = PL_F32;
  t.device = dev.device;
  t.numel = n;
  return t;
}

}  // namespace

std::optional<NodeLayout> hierarchical_layout(const BaguaOptions& o, const PL_StrategyConfig& c) {
  const bool wanted = o.hierarchical < 0 ? c.num_nodes > 1 : o.hierarchical > 0;
  if (!wanted || c.num_nodes <= 1) return std::nullopt;
  NodeLayout l;
  l.node = c.node_rank;
  l.nodes = c.num_nodes;
  l.local = c.local_rank;
  l.local_size = c.local_world_size;
  return l;
}

void check_node_sizes(const std::string& who, const strategy::Group& all, const NodeLayout& layout,
                      const strategy::DeviceContext& dev) {
  const PL_Device cpu{PL_DEVICE_CPU, 0};
  strategy::DeviceMemory mem(dev, 8, who + ": the hierarchical layout check's scratch");
  PL_Tensor t = f32_view(dev, mem, 2);
  // The largest and the smallest node (the maximum of -size), in one allreduce.
  float sizes[2] = {static_cast<float>(layout.local_size), -static_cast<float>(layout.local_size)};
  const std::string check = who + ": hierarchical communication's check of the ranks per node";
  dev.copy(t.data, dev.device, sizes, cpu, sizeof sizes, check);
  all.allreduce(t, PL_REDUCE_MAX, check);
  dev.copy(sizes, cpu, t.data, dev.device, sizeof sizes, check);
  if (sizes[0] != -sizes[1])
    fail(PL_ERR_INVALID_ARGUMENT,
         who + ": hierarchical=true averages node means, which needs the same number of processes on every node, " +
             "and this job's nodes have from " + std::to_string(static_cast<int>(-sizes[1])) + " to " +
             std::to_string(static_cast<int>(sizes[0])) + " (this node: " + std::to_string(layout.local_size) +
             "): start as many processes on every node, or set hierarchical=false");
}

void Hierarchy::connect(const PL_Host* host, strategy::GroupSpec base, const std::string& name,
                        const std::vector<std::string>& leader_needs, const strategy::DeviceContext& dev) {
  disconnect();
  const NodeLayout& layout = layout_;
  const std::string who = base.who;
  strategy::DeviceMemory mem(dev, 4, who + ": the hierarchy's connection check's scratch");
  PL_Tensor one = f32_view(dev, mem, 1);
  const std::string prefix = base.name + name;
  if (layout.local_size > 1) {
    strategy::GroupSpec spec = base;
    spec.name = prefix + ".node" + std::to_string(layout.node);
    spec.rank = layout.local;
    spec.world = layout.local_size;
    spec.needs = {"allreduce", "broadcast"};
    node_ = strategy::Group(host, spec);
    node_.allreduce(one, PL_REDUCE_MAX, who + ": connecting " + spec.name);  // every rank met
  }
  if (layout.leader()) {
    strategy::GroupSpec spec = base;
    spec.name = prefix + ".leaders";
    spec.rank = layout.node;
    spec.world = layout.nodes;
    spec.needs = {"allreduce", "broadcast"};
    spec.needs.insert(spec.needs.end(), leader_needs.begin(), leader_needs.end());
    leaders_ = strategy::Group(host, spec);
    leaders_.allreduce(one, PL_REDUCE_MAX, who + ": connecting " + spec.name);
  }
}

void Hierarchy::allreduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const {
  node_reduce(t, op, what + " (inside the node)");
  if (leaders_) leaders_.allreduce(t, op, what + " (among the nodes' leaders)");
  node_broadcast(t, what + " (the leader's result to its node)");
}

void Hierarchy::node_reduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const {
  if (node_) node_.allreduce(t, op, what);
}

void Hierarchy::node_broadcast(PL_Tensor& t, const std::string& what) const {
  if (node_) node_.broadcast(t, 0, what);
}

void Hierarchy::abort() const noexcept {
  if (node_) node_.abort();
  if (leaders_) leaders_.abort();
}

void Hierarchy::disconnect() noexcept {
  leaders_.reset();
  node_.reset();
}

}  // namespace plrt::bagua
