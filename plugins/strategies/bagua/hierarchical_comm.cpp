// A gradient algorithm's bucket communication, hierarchical (hierarchy.hpp, docs/bagua.md
// "hierarchical").  Per bucket, as reducer stages (bucket_comm.hpp):
//   node       allreduce of the flat buffer inside the node (node_op: the node's mean, or its sum);
//   leaders    on the leader only: the algorithm's own stages (its start, nexts and finish) among
//              the leaders, which leave the result in the flat buffer and the leader's gradients;
//   broadcast  the leader's flat buffer to the node's ranks, which unpack it (finish).
// With one rank a node there is no node group: the leaders' stages alone.
//
// The algorithm's comm sees the bucket as it would alone: its own state in b.state and its own
// stage count in b.stage while it runs (Inner below), the wrapper's state and count otherwise.
#include "hierarchy.hpp"
#include "reducer.hpp"

namespace plrt::bagua {

using strategy::check;

namespace {

enum class Phase {
  kNode,
  kLeaders,
  kBroadcast,
  kDone
};

struct HierState final : reducer::BucketState {
  std::unique_ptr<reducer::BucketState> inner;  // the leaders' comm's (leaders only)
  Phase phase = Phase::kNode;
  int base = 0;  // b.stage when the leaders' stages began
};

HierState& state_of(const reducer::Bucket& b) { return static_cast<HierState&>(*b.state); }

// While alive: b.state and b.stage are the leaders' comm's (restored however the call ends).
class Inner {
 public:
  explicit Inner(reducer::Bucket& b) : b_(b), st_(state_of(b)), own_(std::move(b.state)), stage_(b.stage) {
    b_.state = std::move(st_.inner);
    b_.stage -= st_.base;
  }
  ~Inner() {
    st_.inner = std::move(b_.state);
    b_.state = std::move(own_);
    b_.stage = stage_;
  }
  Inner(const Inner&) = delete;
  Inner& operator=(const Inner&) = delete;

 private:
  reducer::Bucket& b_;
  HierState& st_;
  std::unique_ptr<reducer::BucketState> own_;
  int stage_;
};

class HierarchicalComm final : public reducer::BucketComm {
 public:
  HierarchicalComm(const Hierarchy& h, std::unique_ptr<reducer::BucketComm> leaders, PL_ReduceOp node_op)
      : h_(h), leaders_(std::move(leaders)), node_op_(node_op) {}

  std::string name() const override { return "hierarchical " + leaders_->name(); }
  int64_t padded_numel(int64_t numel) const override { return leaders_->padded_numel(numel); }

  void prepare(reducer::Reducer& r, reducer::Bucket& b) override {
    auto st = std::make_unique<HierState>();
    if (h_.leader()) {
      leaders_->prepare(r, b);
      st->inner = std::move(b.state);
    }
    b.state = std::move(st);
  }

  PL_Work* start(reducer::Reducer& r, reducer::Bucket& b) override {
    HierState& st = state_of(b);
    st.phase = Phase::kNode;
    if (!h_.node()) return enter_leaders(r, b);
    PL_Work* w = nullptr;
    const strategy::Group& g = h_.node();
    check(r.device().host, g.api()->allreduce(g.get(), &b.flat, node_op_, &w),
          r.who() + ": starting the reduction inside the node of " + r.describe(b));
    return w;
  }

  PL_Work* next(reducer::Reducer& r, reducer::Bucket& b) override {
    HierState& st = state_of(b);
    switch (st.phase) {
      case Phase::kNode:
        if (h_.leader()) return enter_leaders(r, b);
        return broadcast(r, b);
      case Phase::kLeaders: {
        PL_Work* w = nullptr;
        {
          Inner in(b);
          w = leaders_->next(r, b);
        }
        return w != nullptr ? w : leave_leaders(r, b);
      }
      default:
        st.phase = Phase::kDone;
        return nullptr;
    }
  }

  void finish(reducer::Reducer& r, reducer::Bucket& b) override {
    if (!h_.leader()) r.unpack(b);  // the leader's broadcast; the leader unpacked in leave_leaders
  }

  const strategy::Group& work_group(const reducer::Reducer& r, const reducer::Bucket& b) const override {
    if (state_of(b).phase == Phase::kLeaders) return leaders_->work_group(r, b);
    return h_.node() ? h_.node() : r.group();
  }

 private:
  PL_Work* enter_leaders(reducer::Reducer& r, reducer::Bucket& b) {
    HierState& st = state_of(b);
    st.phase = Phase::kLeaders;
    st.base = b.stage;
    PL_Work* w = nullptr;
    {
      Inner in(b);
      w = leaders_->start(r, b);
    }
    return w != nullptr ? w : leave_leaders(r, b);
  }

  // The leaders' stages are over: their result into the flat buffer and the leader's gradients,
  // then to the node.
  PL_Work* leave_leaders(reducer::Reducer& r, reducer::Bucket& b) {
    {
      Inner in(b);
      leaders_->finish(r, b);
    }
    if (!h_.node()) {
      state_of(b).phase = Phase::kDone;
      return nullptr;
    }
    return broadcast(r, b);
  }

  PL_Work* broadcast(reducer::Reducer& r, reducer::Bucket& b) {
    state_of(b).phase = Phase::kBroadcast;
    PL_Work* w = nullptr;
    const strategy::Group& g = h_.node();
    check(r.device().host, g.api()->broadcast(g.get(), &b.flat, 0, &w),
          r.who() + ": starting the broadcast inside the node of " + r.describe(b));
    return w;
  }

  const Hierarchy& h_;
  std::unique_ptr<reducer::BucketComm> leaders_;
  PL_ReduceOp node_op_;
};

}  // namespace

std::unique_ptr<reducer::BucketComm> make_hierarchical_comm(const Hierarchy& h,
                                                            std::unique_ptr<reducer::BucketComm> leaders_comm,
                                                            PL_ReduceOp node_op) {
  return std::make_unique<HierarchicalComm>(h, std::move(leaders_comm), node_op);
}

}  // namespace plrt::bagua
