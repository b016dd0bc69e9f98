// Hierarchical communication (docs/bagua.md "hierarchical"): on several nodes, each node's ranks
// first reduce among themselves, the algorithm then runs among one leader per node (local rank
// 0), and each leader broadcasts the result to its node.  Only the leaders' traffic crosses
// between nodes.
//
// The groups (made at setup, each on the core's backend and store, with the core's timeout):
//   "<core group>.node<k>"   node k's ranks, ranked by local rank (none with one rank a node);
//   "<core group>.leaders"   the leaders, ranked by node (made on the leaders only).
// The mean of the node means is the job's mean only when every node has as many ranks:
// check_node_sizes() checks it (one allreduce on the core's group) and fails naming the sizes.
#pragma once

#include <plrt/pl_strategy.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bagua_options.hpp"
#include "bucket_comm.hpp"
#include "group.hpp"

namespace plrt::bagua {

// This process's place among the nodes.
struct NodeLayout {
  int32_t node = 0, nodes = 1;        // node rank, number of nodes
  int32_t local = 0, local_size = 1;  // local rank, ranks on this node
  bool leader() const { return local == 0; }
};

// The layout when hierarchical communication applies: hierarchical=true (the default on several
// nodes) and more than one node; else nullopt.  Every rank decides alike (from the option and the
// number of nodes only), so a node of another size meets check_node_sizes().  With one rank a
// node there are no node groups and the leaders are every rank: the algorithm runs as if flat.
std::optional<NodeLayout> hierarchical_layout(const BaguaOptions& o, const PL_StrategyConfig& c);

// On every rank, before the first connect(): every node has layout.local_size ranks, checked on
// `all` (the core's group, one allreduce); else PL_ERR_INVALID_ARGUMENT naming the smallest and the
// largest node.  `who` begins the message.
void check_node_sizes(const std::string& who, const strategy::Group& all, const NodeLayout& layout,
                      const strategy::DeviceContext& dev);

class Hierarchy {
 public:
  Hierarchy() = default;
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;

  // Hierarchical from now on (at create: the bucket communication asks leader() at setup).
  void plan(const NodeLayout& layout) {
    layout_ = layout;
    on_ = true;
  }
  // On every rank, after plan() (and check_node_sizes, once per instance): connects the groups
  // (base: the core's spec, its name extended with `name`); the leaders' group gets `leader_needs`
  // too.  Every group's ranks have met before it returns.  `dev`: the device of that check's scratch.
  void connect(const PL_Host* host, strategy::GroupSpec base, const std::string& name,
               const std::vector<std::string>& leader_needs, const strategy::DeviceContext& dev);
  // Whether plan() ran: the communication is hierarchical.
  explicit operator bool() const { return on_; }
  // Whether connect() made its groups (and disconnect() has not destroyed them).
  bool connected() const { return static_cast<bool>(node_) || static_cast<bool>(leaders_); }
  const NodeLayout& layout() const { return layout_; }
  bool leader() const { return layout_.leader(); }
  const strategy::Group& node() const { return node_; }        // empty with one rank a node
  const strategy::Group& leaders() const { return leaders_; }  // empty off the leaders

  // Blocking, on every rank of the job: t = op over every rank's t, as node reduce, leaders'
  // allreduce, node broadcast (AVG: the job's mean, the nodes being of one size).
  void allreduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const;
  // Blocking, on every rank of a node: t = op over the node's ranks.
  void node_reduce(PL_Tensor& t, PL_ReduceOp op, const std::string& what) const;
  // Blocking, on every rank of a node: the leader's t to the node's ranks.
  void node_broadcast(PL_Tensor& t, const std::string& what) const;
  // Fails every pending operation on its groups (any thread); never throws.
  void abort() const noexcept;
  // Destroys the groups (the plan stays).
  void disconnect() noexcept;

 private:
  bool on_ = false;
  NodeLayout layout_;
  strategy::Group node_, leaders_;
};

}  // namespace plrt::bagua

namespace plrt::bagua {

// hierarchical_comm.cpp: a gradient algorithm's bucket communication made hierarchical.
// `leaders_comm` runs among the leaders on h.leaders() (made for nodes ranks, this node's rank);
// around it each bucket is reduced with `node_op` inside the node and the result broadcast from the
// leader.  `h` is borrowed and outlives the comm.
std::unique_ptr<reducer::BucketComm> make_hierarchical_comm(const Hierarchy& h,
                                                            std::unique_ptr<reducer::BucketComm> leaders_comm,
                                                            PL_ReduceOp node_op);

}  // namespace plrt::bagua
